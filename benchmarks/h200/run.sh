#!/bin/bash
# One batch of moekit measurements on an H200 machine that has jax (CUDA) but none of moekit's other
# dependencies: install the carried wheels, then run the named phases in order, each bounded by `timeout`,
# writing under $OUT as soon as each finishes. At most 8 files come back: phases tar their run folders, and
# at exit the phases' text logs go into logs.tgz (steps.log stays beside it).
#   bash benchmarks/h200/run.sh preflight micro presets:dense,tokamax tune:<args file>
#   bash benchmarks/h200/run.sh te gmm presets:te,tokamax verify:<args file>   (te: benchmarks/te_h200/README.md)
#   DEADLINE_S=540 bash benchmarks/h200/run.sh te:.te_gmm presets:te_gmm,dense verify:<args file>
#   bash benchmarks/h200/run.sh portability:qwen3,mixtral   portability:dsv2_lite/dense   (benchmarks/run_portability.py)
#   bash benchmarks/h200/run.sh profile:tokamax,dense   profile:te_gmm:moe=te_gmm   (step-time breakdowns)
#   bash benchmarks/h200/run.sh te:.te_gmm attention   (attention kernels against fp32: benchmarks/attention_parity.py)
#   bash benchmarks/h200/run.sh te:.te_gmm survey      (every attention implementation timed: benchmarks/attention_survey.py)
#   bash benchmarks/h200/run.sh fabric:dsv3_proxy_h200   (the fabric phase alone, nothing trained)
#   PRESET_TIMEOUT_S=540 bash benchmarks/h200/run.sh te:.te_gmm presets:te_gmm_text   (then, in a second call:)
#   PRESET_TIMEOUT_S=540 bash benchmarks/h200/run.sh te:.te_gmm presets:te_gmm_fp8_text lossgap:te_gmm_fp8_text,te_gmm_text
# DEADLINE_S: a phase that would start with less than 45 s left is skipped, and none runs past the deadline.
# Needs: .whl/ (git-ignored, carried): the wheels of benchmarks/h200/wheels.txt (benchmarks/h200/README.md says how
# to get them), and .whl_text/ for real text (wheels_text.txt); benchmarks/h200/stubs/ holds the xprof stand-in
# tokamax imports.
set -u
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a "$OUT/steps.log"; }
pack_logs() { (cd "$OUT" && ls ./*.txt >/dev/null 2>&1 && tar czf logs.tgz ./*.txt && rm -f ./*.txt); }
trap pack_logs EXIT
# min(the phase's own bound, the time left before DEADLINE_S)
bound() { local left=$(( ${DEADLINE_S:-100000} - (SECONDS - T0) )); echo $(( $1 < left ? $1 : left )); }
if ls .whl/*.whl >/dev/null 2>&1; then
  # .whl_text/ (optional): the tokenizer wheels real text needs (wheels_text.txt)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    $(ls .whl_text/*.whl 2>/dev/null) \
    >/dev/null 2>&1 || { log "wheel install failed"; exit 1; }
  log "wheels installed"
else
  log "no .whl carried: phases that need MaxText will fail"   # e.g. a call that only stages TE
fi
export PYTHONPATH=/tmp/site:$PWD/benchmarks/h200/stubs:$PWD/src
# One persistent compilation cache per held machine (/tmp dies with it): a row compiled by an earlier call on the same
# machine loads its executable instead of compiling again. MaxText's trainings set their own (its jax_cache_dir,
# ~/jax_cache by default, also kept while the machine is held); this one serves the scripts that call jax directly.
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}
cache_entries() { echo "$(find /tmp/jax_cache ~/jax_cache -type f 2>/dev/null | wc -l) compiled executables cached"; }
log "compilation cache: $(cache_entries)"
trap 'log "compilation cache: $(cache_entries)"; pack_logs' EXIT
MOEKIT="python3 -m moekit"
bench_gmm() {  # back ends, skews, log file under $OUT
  timeout "$(bound "${GMM_TIMEOUT:-110}")" $MOEKIT bench gmm --backends "$1" --skews "$2" --out "$OUT/gmm.json" > "$OUT/$3" 2>&1
  log "bench gmm rc=$?"
}
for phase in "$@"; do
  name=${phase%%:*}; arg=${phase#*:}; [ "$arg" = "$phase" ] && arg=""
  if [ "$(bound 100000)" -lt 45 ]; then log "phase $name $arg skipped: DEADLINE_S=$DEADLINE_S reached"; continue; fi
  log "phase $name $arg"
  case $name in
    preflight)
      { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
        python3 -c "import moekit.base.versions as v, json; print(json.dumps(v.versions()))"
        python3 -c "from jax.profiler import ProfileData as P; print('ProfileData', P.from_file, P.from_serialized_xspace)"
        timeout 60 $MOEKIT train experiment=dsv3_proxy_h200 --dry-run; } > "$OUT/preflight.txt" 2>&1
      log "preflight rc=$?"
      # The checks before launch on this host's jaxlib (CUDA build): the blog's xla_gpu_* flags pass, a misspelled
      # one stops with exit 2 and its key named (expected: the preflight JSON with no problems, then "typo rc=2").
      { timeout 120 $MOEKIT train experiment=dsv3_proxy_h200 xla=blog --dry-run --format json \
          | python3 -c "import json, sys; print(json.dumps(json.load(sys.stdin)['preflight']))"
        timeout 120 $MOEKIT train experiment=dsv3_proxy_h200 xla=blog \
          xla.flags.xla_gpu_enable_latency_hiding_schedular=true --dry-run > /dev/null; echo "typo rc=$?"
      } >> "$OUT/preflight.txt" 2>&1
      # Every command module must import here, or every later `moekit` call fails the same way: stop now.
      python3 -c "import importlib, moekit.cli as c; [importlib.import_module('moekit.commands.' + m) for m in c.COMMANDS.values()]" \
        >> "$OUT/preflight.txt" 2>&1 || { log "moekit cli broken"; exit 1; } ;;
    te)
      # TransformerEngine from benchmarks/te_h200/build.sh's parts (staged by earlier calls). TE's NCCL EP
      # needs NCCL >= 2.30.4. XLA and TE must share one libnccl.so.2: the image's copy becomes a link to the
      # newer one (one file, so the loader maps it once), which is also where TE's core library finds it.
      # $arg: the pack folder (default .te, the full pack; .te_gmm: grouped GEMM only, the machine's NCCL)
      bash benchmarks/te_h200/stage.sh "${arg:-.te}" > "$OUT/te.txt" 2>&1 || { log "te not staged"; cat "$OUT/te.txt"; exit 1; }
      # The image's pip NVIDIA libraries, the ones jax loads.
      nv=$(python3 -c "import glob,sys; print(next(g for d in sys.path if d and not d.startswith('/tmp') for g in glob.glob(d+'/nvidia')))")
      new=/tmp/te_site/nvidia/nccl/lib/libnccl.so.2
      if [ -f "$new" ]; then  # the full pack brings NCCL 2.30.7 for NCCL EP
        echo "linking $nv/nccl/lib/libnccl.so.2 -> $new" >> "$OUT/te.txt"; ln -sf "$new" "$nv/nccl/lib/libnccl.so.2"
        export LD_LIBRARY_PATH=/tmp/te_site/nvidia/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      fi
      python3 benchmarks/te_h200/grouped_gemm_v1.py /tmp/te_site >> "$OUT/te.txt" 2>&1
      # TE's core library must resolve cuDNN/cuBLAS to the copies jax loads (pip's), not the older cuDNN in /lib:
      # mixing them fails with undefined cuDNN symbols. TE also loads cuDNN from CUDNN_HOME first.
      export CUDNN_HOME=$nv/cudnn PYTHONPATH=/tmp/te_site:$PYTHONPATH
      export LD_LIBRARY_PATH=$nv/cudnn/lib:$nv/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      NCCL_DEBUG=VERSION timeout 120 python3 -c "
import sys, jax, jax.numpy as jnp
jax.devices()  # the backend (and its cuDNN) first, as in training
import transformer_engine
import transformer_engine.jax  # loads the core library, then the extension built by benchmarks/te_h200/build.sh
from transformer_engine.jax import moe  # what MaxText's te_moe_block imports
from transformer_engine.jax.dense import grouped_dense
ext = sys.modules['transformer_engine_jax']
print('te', transformer_engine.__version__, 'cudnn', ext.get_cudnn_version(), 'nccl', transformer_engine._nccl_runtime_version(),
      'nccl_ep', transformer_engine.is_nccl_ep_available(), 'jax', jax.__version__, jax.devices())
x = jnp.ones((256, 128), jnp.bfloat16); w = jnp.ones((4, 128, 64), jnp.bfloat16)
print('grouped_dense', grouped_dense(x, w, jnp.array([64, 64, 64, 64], jnp.int32)).sum())
" >> "$OUT/te.txt" 2>&1; rc=$?; log "te import rc=$rc"; [ $rc = 0 ] || { tail -30 "$OUT/te.txt"; exit 1; }
      # moe=te_gmm's grouped GEMM (bf16 and FP8, forward and gradients) against XLA's ragged_dot, before any training.
      timeout 240 python3 benchmarks/te_h200/check_te_gmm.py >> "$OUT/te.txt" 2>&1; log "te_gmm check rc=$?" ;;
    attention)
      # Layer-level parity of MaxText's attention kernels against fp32 (benchmarks/attention_parity.py): after `te`
      # for cudnn_flash_te. $arg: extra arguments joined by + (--layouts=bshd+--shapes=mla); none: the full table.
      IFS=+ read -ra aargs <<< "$arg"
      timeout "$(bound "${ATTENTION_TIMEOUT:-300}")" python3 benchmarks/attention_parity.py --out /tmp/attention \
        "${aargs[@]}" > "$OUT/attention.txt" 2>&1
      log "attention parity rc=$?"; cp /tmp/attention/attention_parity.json "$OUT/" 2>/dev/null
      # The upstream reproduction docs/performance.md prints (rc 1: TE attends only the first segment's queries)
      timeout 120 python3 benchmarks/te_dense_mask_repro.py >> "$OUT/attention.txt" 2>&1; log "te dense-mask repro rc=$?" ;;
    survey)
      # Every attention implementation JAX reaches, at the MLA and GQA shapes (benchmarks/attention_survey.py): after
      # `te` for cudnn_flash_te. $arg: extra arguments joined by + (--shapes=mla+--repeats=5); none: the full table.
      IFS=+ read -ra sargs <<< "$arg"
      timeout "$(bound "${SURVEY_TIMEOUT:-300}")" python3 benchmarks/attention_survey.py --out /tmp/survey \
        "${sargs[@]}" > "$OUT/survey.txt" 2>&1
      log "attention survey rc=$?"; cp /tmp/survey/attention_survey.json "$OUT/" 2>/dev/null ;;
    verify)
      # $arg: a file of `moekit verify` arguments, one per line
      mapfile -t vargs < "$arg"
      timeout -s INT "$(bound "${VERIFY_TIMEOUT:-300}")" $MOEKIT verify "${vargs[@]}" --out /tmp/verify > "$OUT/verify.txt" 2>&1; log "verify rc=$?"
      cp /tmp/verify/verify.json "$OUT/" 2>/dev/null ;;
    gmm)
      bench_gmm "${GMM_BACKENDS:-tokamax,te}" "${GMM_SKEWS:-balanced,dirichlet:1.0}" gmm.txt ;;
    micro)
      bench_gmm tokamax,tokamax_triton,te balanced,dirichlet:1.0,dirichlet:0.3 micro.txt
      timeout ${DISPATCH_TIMEOUT:-60} $MOEKIT bench dispatch --out "$OUT/dispatch.json" >> "$OUT/micro.txt" 2>&1; log "bench dispatch rc=$?" ;;
    presets)
      # One /tmp/presets/presets.json per session: later phases (and calls) add their presets to it.
      # PRESETS_REFERENCE: the row the loss check compares with (run_presets.py's default: dense)
      # PRESETS_EXPERIMENT: another experiment (smoke rehearses on a CPU machine); PRESETS_DIR: another folder (one
      # per experiment: the rows' folders are named after the rows)
      pdir=${PRESETS_DIR:-/tmp/presets}
      timeout -s INT "$(bound "${PRESETS_TIMEOUT:-540}")" python3 benchmarks/run_presets.py --out "$pdir" \
        --presets "$arg" --append --steps ${STEPS:-10} ${PRESETS_REFERENCE:+--reference "$PRESETS_REFERENCE"} \
        ${PRESETS_EXPERIMENT:+--experiment "$PRESETS_EXPERIMENT"} \
        --timeout-s ${PRESET_TIMEOUT_S:-150} >> "$OUT/presets.txt" 2>&1; log "presets rc=$?"
      cp "$pdir/presets.json" "$OUT/" 2>/dev/null
      tar czf "$OUT/presets_runs.tgz" --exclude='*/profile/trace' --exclude='*/profile/hlo' --exclude='*/tensorboard' \
        --exclude='*/checkpoints' -C "$(dirname "$pdir")" "$(basename "$pdir")" 2>/dev/null ;;
    lossgap)
      # $arg: CANDIDATE,REFERENCE: two rows of earlier presets phases in ${PRESETS_DIR:-/tmp/presets} (the FP8 row and
      # its bf16 twin): the mean relative loss gap over the last 20% of the steps (docs/metrics.md), with provenance
      pdir=${PRESETS_DIR:-/tmp/presets}; cand=${arg%%,*}; ref=${arg#*,}
      python3 benchmarks/loss_gap.py "$pdir/$cand" "$pdir/$ref" --out "$OUT/loss_gap_${cand}.json" \
        >> "$OUT/loss_gap.txt" 2>&1; log "loss gap rc=$? (0: meets the goal, 1: misses it, 2: not comparable)" ;;
    profile)
      # $arg: presets to train with profile=on (names from run_presets.py, or NAME:OVERRIDE+OVERRIDE). The first
      # one is also trained untraced (PROFILE_BASELINE= for none, or another name): the overhead reference.
      # PRESETS_EXPERIMENT=smoke rehearses the phase on a CPU machine. PROFILE_DIR: another folder (one per experiment:
      # the runs' folders are named after the presets, so a second experiment in the same folder finds them taken).
      base=${PROFILE_BASELINE-${arg%%,*}}; prof=${PROFILE_DIR:-/tmp/profile}
      timeout -s INT "$(bound "${PROFILE_TIMEOUT:-560}")" python3 benchmarks/run_presets.py --out "$prof" --presets "$arg" \
        --profile ${base:+--baseline "$base"} --steps ${STEPS:-10} --timeout-s ${PRESET_TIMEOUT_S:-300} \
        ${PRESETS_EXPERIMENT:+--experiment "$PRESETS_EXPERIMENT"} > "$OUT/profile.txt" 2>&1; log "profile rc=$?"
      cp "$prof/presets.json" "$OUT/profiles.json" 2>/dev/null
      for f in "$prof"/*/profile.json; do [ -f "$f" ] && cp "$f" "$OUT/profile_$(basename "$(dirname "$f")").json"; done
      # Small files only: the raw traces and HLO dumps (profile/) and TensorBoard events stay on the machine.
      tar czf "$OUT/profile_runs.tgz" -C "$(dirname "$prof")" --exclude='*/profile/trace' --exclude='*/profile/hlo' \
        --exclude='*/tensorboard' "$(basename "$prof")" 2>/dev/null
      du -sh "$prof"/*/profile/* >> "$OUT/profile.txt" 2>&1 ;;
    portability)
      # $arg: FAMILIES[/ROWS]: families of benchmarks/run_portability.py (qwen3,mixtral,...) and the rows of
      # run_presets.py to train (default $PORTABILITY_ROWS or dense,tokamax; the first is the baseline; "qwen3/"
      # for none), plus one row from $PORTABILITY_ROW (NAME=OVERRIDES, e.g. te_gmm=moe=te_gmm). Each phase has its
      # own folder and portability_<n>.json (n counts the phase); --record merges them.
      fams=${arg%%/*}; rows=${PORTABILITY_ROWS:-dense,tokamax}; [ "$fams" != "$arg" ] && rows=${arg#*/}
      n=$((${n:-0} + 1)); dir=/tmp/portability/$n
      timeout -s INT "$(bound "${PORTABILITY_TIMEOUT:-560}")" python3 benchmarks/run_portability.py --out "$dir" \
        --families "$fams" --rows "$rows" ${PORTABILITY_ROW:+--row "$PORTABILITY_ROW"} \
        --steps ${STEPS:-10} --timeout-s ${PRESET_TIMEOUT_S:-150} > "$OUT/portability_$n.txt" 2>&1
      log "portability rc=$?"
      cp "$dir/portability.json" "$OUT/portability_$n.json" 2>/dev/null
      tar czf "$OUT/portability_runs_$n.tgz" -C /tmp/portability "$n" 2>/dev/null ;;
    resume)
      # $arg: overrides joined by + (default moe=te_gmm). The same run three ways on $PRESETS_EXPERIMENT: uninterrupted
      # without checkpoints (plain); with checkpoint.every=RESUME_EVERY, moekit SIGKILLed RESUME_PAST steps after the
      # checkpoint of step RESUME_EVERY is committed, then relaunched on the same run.dir (killed). The report compares
      # them; the run folders come back without their checkpoints. RESUME_DIR: where checkpoints fit (each holds
      # parameters and optimizer state).
      IFS=+ read -ra ovs <<< "${arg:-moe=te_gmm}"; every=${RESUME_EVERY:-6}; d=${RESUME_DIR:-/tmp/resume}
      rm -rf "$d"; mkdir -p "$d"
      common=(train "experiment=${PRESETS_EXPERIMENT:-dsv3_proxy_h200}" "${ovs[@]}" "train.steps=${STEPS:-16}")
      timeout -s INT "$(bound 240)" $MOEKIT "${common[@]}" "run.dir=$d/plain" > "$OUT/resume.txt" 2>&1
      log "resume plain rc=$?"
      setsid $MOEKIT "${common[@]}" "checkpoint.every=$every" "run.dir=$d/killed" >> "$OUT/resume.txt" 2>&1 &
      pid=$!; until_s=$((SECONDS + $(bound 300)))
      while kill -0 $pid 2>/dev/null && [ $SECONDS -lt $until_s ]; do
        last=$(grep -o '"step": [0-9]*' "$d/killed/metrics.jsonl" 2>/dev/null | tail -1 | tr -dc 0-9)
        ls -d "$d"/killed/*/checkpoints/"$every" >/dev/null 2>&1 && [ "${last:-0}" -ge $((every + ${RESUME_PAST:-3})) ] && break
        sleep 0.2
      done
      kill -9 -- -$pid 2>/dev/null; wait $pid 2>/dev/null; log "resume killed after step ${last:-none}"
      timeout -s INT "$(bound 300)" $MOEKIT "${common[@]}" "checkpoint.every=$every" "run.dir=$d/killed" >> "$OUT/resume.txt" 2>&1
      log "resume relaunch rc=$?"
      $MOEKIT report "$d/plain" "$d/killed" --out "$d/report" >> "$OUT/resume.txt" 2>&1
      tar czf "$OUT/resume_runs.tgz" --exclude=checkpoints --exclude=tensorboard -C "$d" . 2>/dev/null ;;
    fabric)
      # The fabric phase on this machine's devices, nothing trained ($arg: the experiment, default dsv3_proxy_h200):
      # its console line and fabric.json (one GPU: no collective to check, the line says so).
      timeout "$(bound 120)" $MOEKIT fabric "experiment=${arg:-dsv3_proxy_h200}" run.dir=/tmp/fabric > "$OUT/fabric.txt" 2>&1
      log "fabric rc=$?"; cp /tmp/fabric/fabric.json "$OUT/" 2>/dev/null ;;
    tune)
      # $arg: a file of `moekit tune` arguments, one per line
      mapfile -t targs < "$arg"
      timeout -s INT "$(bound "${TUNE_TIMEOUT:-480}")" $MOEKIT tune "${targs[@]}" --out /tmp/tune > "$OUT/tune.txt" 2>&1; log "tune rc=$?"
      cp /tmp/tune/*/*/tune.json "$OUT/" 2>/dev/null; cp /tmp/tune/*/*/*.yaml "$OUT/" 2>/dev/null   # <name>/<timestamp>/
      tar czf "$OUT/tune_runs.tgz" -C /tmp tune 2>/dev/null ;;
    *) log "unknown phase $name" ;;
  esac
done
log "done"
