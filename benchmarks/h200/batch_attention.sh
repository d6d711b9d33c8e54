#!/bin/bash
# The attention lever on one GPU, as whole batches: each call runs one batch and picks its rows by the card that came.
# An H200 runs the goals' rows (batch 10 bf16, 14 FP8); an H100 (80 GB) runs the rows that fit it (batch 2 and 4):
# evidence for a lever, never for the goal (docs/performance/attention_h200.md).
#   bash benchmarks/h200/batch_attention.sh survey    # te, the survey, the kernels in training against cuDNN
#   bash benchmarks/h200/batch_attention.sh goals     # the goal rows again (the goals count twice: two calls)
#   bash benchmarks/h200/batch_attention.sh verify    # moekit verify of the kernel against cuDNN, 20 steps, batch 10
#   bash benchmarks/h200/batch_attention.sh textgap   # the FP8 real-text loss gap, documents kept apart (THD)
# Carries .whl and .te_gmm (benchmarks/h200/README.md); results under $OUT as benchmarks/h200/run.sh writes them.
set -u
batch=${1:?usage: batch_attention.sh survey|goals|verify|textgap}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case $card in
  *H200*) B=10; F=14 ;;
  *H100*) B=2; F=4 ;;   # what fits 80 GB (batch 4 with MaxText's attention ran out of memory there, 2026-12-07)
  *) echo "batch_attention.sh: no H100 or H200 here (${card:-no nvidia-smi})" >&2; exit 2 ;;
esac
echo "card: $card (bf16 batch $B, FP8 batch $F)" | tee "$OUT/card.txt"
run() { bash benchmarks/h200/run.sh "$@"; }
ref="te_gmm_b$B:moe=te_gmm+train.per_device_batch_size=$B"
mosaic="te_gmm_mosaic_b$B:moe=te_gmm+train.per_device_batch_size=$B+model.attention=tokamax_mosaic+~maxtext.extra.attention"
fp8="te_gmm_fp8_b$F:moe=te_gmm+precision=fp8+train.per_device_batch_size=$F"
fp8_mosaic="te_gmm_fp8_mosaic_b$F:moe=te_gmm+precision=fp8+train.per_device_batch_size=$F+model.attention=tokamax_mosaic+~maxtext.extra.attention"
# FP8 two rows above the goals' best batch (14: 114.1 GiB peak of 125.8 usable): the batch lever where it fits
fp8_16="te_gmm_fp8_b$((F + 2)):moe=te_gmm+precision=fp8+train.per_device_batch_size=$((F + 2))"
fp8_mosaic16="te_gmm_fp8_mosaic_b$((F + 2)):moe=te_gmm+precision=fp8+train.per_device_batch_size=$((F + 2))+model.attention=tokamax_mosaic+~maxtext.extra.attention"
case $batch in
  survey)
    DEADLINE_S=${DEADLINE_S:-575} SURVEY_TIMEOUT=${SURVEY_TIMEOUT:-200} PRESET_TIMEOUT_S=${PRESET_TIMEOUT_S:-140} \
      PRESETS_REFERENCE=te_gmm_b$B run te:.te_gmm survey:--repeats=5 "presets:$ref,$mosaic,$fp8_mosaic" ;;
  goals)
    # An H100 cannot hold the goals' batches: it runs the real-text FP8 loss gap instead (batch 2 fits 80 GB).
    if [ "$B" != 10 ]; then exec "$0" textgap; fi
    DEADLINE_S=${DEADLINE_S:-575} PRESET_TIMEOUT_S=${PRESET_TIMEOUT_S:-140} PRESETS_DIR=/tmp/presets_goals \
      PRESETS_REFERENCE=te_gmm_b$B run te:.te_gmm "presets:$ref,$fp8,$fp8_mosaic16,$fp8_16" ;;
  textgap)
    # The FP8 real-text loss gap with documents kept apart (TE's THD on packed rows): carries .whl_text too.
    DEADLINE_S=${DEADLINE_S:-575} PRESET_TIMEOUT_S=${PRESET_TIMEOUT_S:-280} PRESETS_DIR=/tmp/presets_text \
      run te:.te_gmm presets:te_gmm_text_thd,te_gmm_fp8_text_thd lossgap:te_gmm_fp8_text_thd,te_gmm_text_thd ;;
  verify)
    DEADLINE_S=${DEADLINE_S:-575} VERIFY_TIMEOUT=${VERIFY_TIMEOUT:-480} run te:.te_gmm verify:benchmarks/h200/verify_mosaic_attention.args ;;
  *) echo "batch_attention.sh: unknown batch $batch (survey, goals, verify, textgap)" >&2; exit 2 ;;
esac
