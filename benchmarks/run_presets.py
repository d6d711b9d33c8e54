"""Run `moekit train experiment=<experiment>` for a set of presets, then record the results with provenance.

    python benchmarks/run_presets.py --out DIR [--presets a,b] [--row NAME='OVERRIDES' ...] [--steps N] [--timeout-s S]
        [--append]
    python benchmarks/run_presets.py --out DIR --presets tokamax,dense --profile --baseline tokamax   # breakdowns
    python benchmarks/run_presets.py --record DIR/presets.json [MORE.json]   # table -> its page
    python benchmarks/run_presets.py --record DIR/presets.json --section NAME   # a table of its own (another session)

A preset is a name from PRESETS or NAME:OVERRIDE+OVERRIDE for one not listed (te_gmm:moe=te_gmm). With --profile
each preset trains with profile=on (its run directory gets profile.json) and --baseline NAME also trains NAME
untraced, so that the profiled runs' untraced steps can be set against it (the profiling overhead).

Each preset is a real `moekit train` in DIR/<preset>/ (config, command, versions, metrics, summary). Peak
device memory comes from benchmarks/peakmem (the allocator's high-water mark, read at exit). The loss check
compares each preset's loss trajectory with REFERENCE's at the same tokens per step (moekit.series.tuning's gate);
a quantized preset also reports its loss gap to its bf16 twin (BF16_TWIN) over the steps both ran. --append adds
to DIR/presets.json instead of starting it anew (a later call of one batch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))
import moekit_python  # noqa: E402, F401 (re-runs this script with .venv/bin/python when this Python lacks moekit's stack)

from moekit.config.load import load  # noqa: E402
from moekit.config.sweeps import expand  # noqa: E402
from moekit.observe.reports import compare, loss_gap  # noqa: E402
from moekit.series import trial, tuning  # noqa: E402

EXPERIMENT = "dsv3_proxy_h200"
REFERENCE = "dense"  # masked dense compute of every expert: no grouped-GEMM kernel in the way
# name -> (overrides on top of the experiment, what it shows)
PRESETS: dict[str, tuple[list[str], str]] = {
    "tokamax": ([], "dropless grouped GEMM: tokamax Mosaic GPU kernel"),
    "maxtext_default": (
        ["moe=megablox", "moe.force=true", "train.steps=3"],
        "MaxText's default sparse path (megablox=true): a TPU Pallas kernel, interpreted on GPU",
    ),
    "dense": (["moe=dense"], "dropless, every expert on every token, masked (no grouped GEMM)"),
    "tokamax_batch8": (["train.per_device_batch_size=8"], "tokamax, per-device batch 8 (32,768 tokens/step)"),
    "tokamax_xla_blog": (["xla=blog"], "tokamax + the blog's XLA flags and PGLE"),
    "tokamax_offload_blog": (["memory=offload_blog"], "tokamax + the blog's remat/offload policy"),
    "te": (["moe=te"], "TransformerEngine MoE block: cuBLAS grouped GEMM, NCCL EP dispatch/combine"),
    "te_fp8": (["moe=te", "precision=fp8"], "TE MoE block + FP8 current scaling on the dense GEMMs"),
    "tokamax_fp8": (["precision=fp8"], "tokamax experts + TE FP8 current scaling on the dense GEMMs (needs TE)"),
    "te_gmm": (
        ["moe=te_gmm", "train.steps=50"],
        "MaxText's sparse path, expert GEMMs on TE's grouped GEMM (cuBLAS), bf16; 50 steps: the FP8 row's twin",
    ),
    "te_gmm_fp8": (
        ["moe=te_gmm", "precision=fp8", "train.steps=50"],
        "moe=te_gmm + FP8 current scaling on the expert (TE grouped) and dense GEMMs; 50 steps",
    ),
    # Batch 2: 300 steps of 8,192 tokens stay within one pass over the stdlib corpus (~3.2M tokens), so the loss
    # measures learning rather than memorising; the pair fits one benchmark call.
    "te_gmm_text": (
        ["moe=te_gmm", "data=stdlib", "train.steps=300", "train.per_device_batch_size=2"],
        "moe=te_gmm bf16 on real text (data=stdlib: the Python stdlib corpus), batch 2, 300 steps: the FP8 text "
        "row's twin",
    ),
    "te_gmm_fp8_text": (
        ["moe=te_gmm", "precision=fp8", "data=stdlib", "train.steps=300", "train.per_device_batch_size=2"],
        "moe=te_gmm + FP8 (expert and dense GEMMs) on real text (data=stdlib), batch 2, 300 steps",
    ),
    # The same pair with attention that keeps documents apart: TE's fused attention with segment ids (THD) on the
    # packed rows; cudnn_flash_jax, the twins above, attends across the documents packed before each token.
    "te_gmm_text_thd": (
        ["moe=te_gmm", "data=stdlib", "train.steps=300", "train.per_device_batch_size=2",
         "maxtext.extra.attention=cudnn_flash_te", "data.max_segments_per_seq=32"],
        "te_gmm_text with TE's fused attention, documents kept apart (THD, segment ids)",
    ),
    "te_gmm_fp8_text_thd": (
        ["moe=te_gmm", "precision=fp8", "data=stdlib", "train.steps=300", "train.per_device_batch_size=2",
         "maxtext.extra.attention=cudnn_flash_te", "data.max_segments_per_seq=32"],
        "te_gmm_fp8_text with TE's fused attention, documents kept apart (THD, segment ids)",
    ),
    "te_gmm_minimal": (
        ["moe=te_gmm", "memory=remat_minimal"],
        "moe=te_gmm, MaxText remat_policy=minimal (keeps the matmul outputs: less recompute, more memory)",
    ),
    "te_gmm_fp8_dense": (
        ["moe=te_gmm", "precision=fp8", "moe.expert_precision=bf16"],
        "moe=te_gmm with bf16 expert GEMMs; FP8 current scaling on the dense GEMMs only",
    ),
    "te_gmm_fp8_dense_minimal": (
        ["moe=te_gmm", "precision=fp8", "moe.expert_precision=bf16", "memory=remat_minimal"],
        "te_gmm_fp8_dense + remat_policy=minimal",
    ),
    # The one-GPU goals (docs/performance.md, "Goals"): batch 10 with TE's fused attention on synthetic rows of one
    # segment each (data.max_segments_per_seq=1: a bound >= 2 makes MaxText split synthetic rows into segments that
    # TE's dense-mask path reduces to the first one; docs/performance.md, "Attention parity"). te_gmm_b10 is their
    # loss-check reference: the same batch on cudnn_flash_jax.
    "te_gmm_b10": (
        ["moe=te_gmm", "train.per_device_batch_size=10"],
        "moe=te_gmm bf16, batch 10, cuDNN flash attention through JAX: the goal rows' reference",
    ),
    "te_gmm_te_attn_b10": (
        ["moe=te_gmm", "train.per_device_batch_size=10", "maxtext.extra.attention=cudnn_flash_te",
         "data.max_segments_per_seq=1"],
        "moe=te_gmm bf16, batch 10, TE's fused attention (cudnn_flash_te), one segment per row",
    ),
    "te_gmm_fp8_te_attn_b10": (
        ["moe=te_gmm", "precision=fp8", "train.per_device_batch_size=10", "maxtext.extra.attention=cudnn_flash_te",
         "data.max_segments_per_seq=1"],
        "moe=te_gmm FP8 (expert and dense GEMMs), batch 10, TE's fused attention, one segment per row",
    ),
    "te_gmm_te_attn_b10_offload": (
        ["moe=te_gmm", "train.per_device_batch_size=10", "maxtext.extra.attention=cudnn_flash_te",
         "data.max_segments_per_seq=1", "memory=offload_blog"],
        "te_gmm_te_attn_b10 + the blog's remat/offload policy (expert up-projections to host, the rest kept)",
    ),
    "te_gmm_fp8_te_attn_b14": (
        ["moe=te_gmm", "precision=fp8", "train.per_device_batch_size=14", "maxtext.extra.attention=cudnn_flash_te",
         "data.max_segments_per_seq=1"],
        "moe=te_gmm FP8, batch 14, TE's fused attention, one segment per row",
    ),
    # The attention lever (docs/performance/attention_h200.md): the survey's kernels in training at the goals' batch,
    # against te_gmm_b10 (cuDNN flash through JAX). tokamax_mosaic is moekit's hook (moekit.attention); flash is
    # MaxText's own GPU flash kernel (tokamax's Pallas Triton). ~maxtext.extra.attention: the proxy names its kernel
    # there, which would override model.attention.
    "te_gmm_mosaic_b10": (
        ["moe=te_gmm", "train.per_device_batch_size=10", "model.attention=tokamax_mosaic", "~maxtext.extra.attention"],
        "moe=te_gmm bf16, batch 10, tokamax's Mosaic GPU flash attention (model.attention=tokamax_mosaic)",
    ),
    "te_gmm_fp8_mosaic_b14": (
        ["moe=te_gmm", "precision=fp8", "train.per_device_batch_size=14", "model.attention=tokamax_mosaic",
         "~maxtext.extra.attention"],
        "moe=te_gmm FP8, batch 14, tokamax's Mosaic GPU flash attention",
    ),
    "te_gmm_fp8_b14": (
        ["moe=te_gmm", "precision=fp8", "train.per_device_batch_size=14"],
        "moe=te_gmm FP8, batch 14, cuDNN flash attention through JAX (the FP8 goal's best row, run E)",
    ),
    "te_gmm_flash_b10": (
        ["moe=te_gmm", "train.per_device_batch_size=10", "maxtext.extra.attention=flash"],
        "moe=te_gmm bf16, batch 10, MaxText's GPU flash attention (tokamax's Pallas Triton kernel)",
    ),
    # The recompute lever at batch 6 (tokens/s per device is flat from batch 6 to 12 with remat full): keep the GEMM
    # outputs so that the backward reruns no GEMM. te_gmm_b6 is their loss-check reference.
    "te_gmm_b6": (["moe=te_gmm"], "moe=te_gmm bf16, batch 6, remat full: the keep rows' reference"),
    "te_gmm_keep": (
        ["moe=te_gmm", "memory=remat_keep_gemms"],
        "moe=te_gmm bf16, batch 6, memory=remat_keep_gemms (every GEMM output and the routed input kept)",
    ),
    "te_gmm_mwc": (
        ["moe=te_gmm", "memory=remat_minimal", "memory.remat_policy=minimal_with_context"],
        "moe=te_gmm bf16, batch 6, MaxText remat_policy=minimal_with_context (minimal + the attention output)",
    ),
    "te_gmm_keep_unscanned": (
        ["moe=te_gmm", "memory=remat_keep_gemms", "maxtext.extra.scan_layers=false"],
        "te_gmm_keep with the layers unrolled (scan_layers=false)",
    ),
    "te_gmm_fp8_b6": (["moe=te_gmm", "precision=fp8"], "moe=te_gmm FP8, batch 6, remat full"),
    "te_gmm_fp8_keep": (
        ["moe=te_gmm", "precision=fp8", "memory=remat_keep_gemms"],
        "moe=te_gmm FP8, batch 6, memory=remat_keep_gemms",
    ),
}
# A quantized preset -> the bf16 preset of the same path: its loss gap is reported (it changes the arithmetic).
BF16_TWIN = {
    "te_gmm_fp8": "te_gmm",
    "te_gmm_fp8_text": "te_gmm_text",
    "te_gmm_fp8_text_thd": "te_gmm_text_thd",
    "te_gmm_fp8_dense": "te_gmm",
    "te_gmm_fp8_dense_minimal": "te_gmm_minimal",
    "tokamax_fp8": "tokamax",
    "te_fp8": "te",
    "te_gmm_fp8_te_attn_b10": "te_gmm_te_attn_b10",
    "te_gmm_fp8_b6": "te_gmm_b6",
    "te_gmm_fp8_keep": "te_gmm_keep",
}
MARK_BEGIN, MARK_END = "<!-- BEGIN presets (benchmarks/run_presets.py --record) -->", "<!-- END presets -->"
PROFILE_BEGIN, PROFILE_END = "<!-- BEGIN profile (benchmarks/run_presets.py --record) -->", "<!-- END profile -->"


def preset(spec: str) -> tuple[str, list[str], str]:
    """(name, overrides, what) of a preset name or a NAME:OVERRIDE+OVERRIDE spec."""
    name, _, extra = spec.partition(":")
    if extra:
        return name, extra.split("+"), f"ad hoc: {' '.join(extra.split('+'))}"
    if name not in PRESETS:
        raise SystemExit(f"unknown preset {name!r}: one of {', '.join(PRESETS)}, or NAME:OVERRIDE+OVERRIDE")
    return name, list(PRESETS[name][0]), PRESETS[name][1]


def parse_rows(specs: list[str], extra: list[str]) -> dict[str, tuple[list[str], str]]:
    """Presets (names or NAME:OVERRIDE+OVERRIDE specs) plus `NAME=OVERRIDES` rows (overrides separated by
    spaces), in the order given: name -> (overrides, what it shows). Overrides that sweep (Hydra's grammar,
    moe=dense,tokamax) give one row per run, NAME_0, NAME_1, ... (moekit.config.sweeps)."""
    rows: dict[str, tuple[list[str], str]] = {}
    for name, ov, what in map(preset, specs):
        rows |= _swept(name, ov, what)
    for spec in extra:
        name, sep, overrides = spec.partition("=")
        if not sep or not name or name in rows:
            raise SystemExit(f"--row {spec!r}: give NAME=OVERRIDES with a new name, e.g. --row te_gmm='moe=te_gmm'")
        rows |= _swept(name, overrides.split(), f"`{overrides}`")
    return rows


def _swept(name: str, overrides: list[str], what: str) -> dict[str, tuple[list[str], str]]:
    runs = expand(overrides) if overrides else [[]]
    if len(runs) == 1:
        return {name: (overrides, what)}  # as given: a row that does not sweep keeps its override text
    return {f"{name}_{i}": (run, f"`{' '.join(run)}`") for i, run in enumerate(runs)}


def plan_rows(rows: dict[str, tuple[list[str], str]], steps: int, experiment: str) -> dict[str, tuple[list, dict]]:
    """Every row composed and checked (moekit's checks) before any runs: name -> (overrides, config)."""
    plans = {}
    for name, (extra, _) in rows.items():
        overrides = [f"experiment={experiment}", f"train.steps={steps}", *extra]
        plans[name] = (overrides, load(overrides, warn=False))
    return plans


def run(
    out: Path,
    rows: dict[str, tuple[list[str], str]],
    steps: int,
    timeout_s: float,
    experiment: str,
    reference: str = REFERENCE,
    profile: bool = False,
    baseline: str | None = None,
    append: bool = False,
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    entries: dict[str, tuple[list[str], str]] = {}
    base_name = ""
    if baseline:
        base_name, ov, what = preset(baseline)
        entries[base_name] = (ov, what)
    untraced_of = {}  # profiled preset -> its untraced twin (the baseline, when it is the same preset)
    for name, (ov, what) in rows.items():
        if not profile:
            entries[name] = (ov, what)
            continue
        entries[f"{name}_profiled"] = ([*ov, "profile=on"], f"{what}; profile=on")
        if name == base_name:
            untraced_of[f"{name}_profiled"] = name
    plans = plan_rows(entries, steps, experiment)
    env = {
        "MOEKIT_RECORD_PEAK_MEMORY": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "benchmarks" / "peakmem"), os.environ.get("PYTHONPATH", "")]),
    }
    results = {
        "experiment": experiment,
        "reference": reference,
        "started": datetime.now(UTC).isoformat(),
        "presets": {},
    }
    path = out / "presets.json"
    if append and path.is_file():
        results = merged([path]) | {"experiment": experiment}
    for name, (overrides, cfg) in plans.items():
        print(f"== {name}: moekit train {' '.join(overrides)}", flush=True)
        r = trial.run(overrides, out / name, timeout_s, env)
        r |= {"what": entries[name][1], "batch": list(tuning.batch_key(cfg))}
        if cfg.profile.enabled:
            r["profile"] = breakdown_record(out / name, results["presets"].get(untraced_of.get(name, "")))
        results["presets"][name] = r
        print(
            json.dumps(
                {
                    k: r.get(k)
                    for k in ("status", "step_time_s", "tflops_per_device", "peak_memory_gib", "wall_s", "error")
                }
            ),
            flush=True,
        )
        path.write_text(json.dumps(results, indent=2) + "\n")  # after every preset: a cut-off run keeps the rest
    return path


def breakdown_record(run_dir: Path, baseline: dict | None) -> dict:
    """The mean traced step of a profiled run (ms per bucket) and its overhead against an untraced baseline run."""
    try:
        prof = json.loads((run_dir / "profile.json").read_text())
    except (OSError, ValueError):
        return {"error": f"no profile.json in {run_dir}"}
    mean = prof.get("mean") or {}
    untraced = (prof.get("maxtext_step_time") or {}).get("untraced_median_s")
    base = (baseline or {}).get("step_time_s")
    provenance = prof.get("provenance") or {}
    return {
        "hardware": provenance.get("hardware"),
        # A profiled run with no untraced steady steps has no step-time number, so its record has no versions or
        # date (moekit.series.trial): the breakdown keeps its own, for the table's provenance.
        "date": provenance.get("date"),
        "versions": provenance.get("versions"),
        "traced_step_ms": round(mean.get("window_s", 0.0) * 1e3, 2),
        "buckets_ms": {b: round(v * 1e3, 2) for b, v in (mean.get("buckets_s") or {}).items()},
        "idle_ms": round(mean.get("idle_s", 0.0) * 1e3, 2),
        "communication_share_of_kernel_time": mean.get("communication_share_of_kernel_time"),
        "collective_hidden_share": mean.get("collective_hidden_share"),
        "segmentation": sorted({d["segmentation"] for d in prof["devices"]}),
        "hlo_dump": all(d["hlo_dump"] for d in prof["devices"]),
        "analysis_s": prof.get("analysis_s"),
        "untraced_median_s": untraced,
        "baseline_step_time_s": base,
        "overhead": untraced / base - 1 if untraced and base else None,
    }


def loss_checks(results: dict) -> dict[str, str]:
    presets = results["presets"]
    ref = presets.get(results["reference"], {})
    out = {}
    for name, r in presets.items():
        if name == results["reference"]:
            out[name] = "reference"
        elif not r.get("losses") or not ref.get("losses"):
            out[name] = "-"
        elif r["batch"] != ref.get("batch"):
            out[name] = "n/a (other tokens/step)"
        elif r.get("status") == "ok" and len(r["losses"]) != len(ref["losses"]):
            # train.steps sets the learning-rate schedule (warm-up, decay): runs of other lengths are other runs
            out[name] = f"n/a ({len(r['losses'])} steps vs {len(ref['losses'])}: another learning-rate schedule)"
        else:
            ok, diff, bad = compare.compare_losses(ref["losses"], r["losses"])
            out[name] = f"ok (max diff {diff:.1e})" if ok else f"**diverges** at step {bad} (max diff {diff:.3f})"
    return out


def loss_gaps(results: dict) -> list[str]:
    """One line per quantized preset whose bf16 twin ran: how far its losses are from the twin's."""
    presets, lines = results["presets"], []
    for name, twin in BF16_TWIN.items():
        q, b = presets.get(name, {}), presets.get(twin, {})
        if not q.get("losses") or not b.get("losses") or q.get("batch") != b.get("batch"):
            continue
        if len(q["losses"]) != len(b["losses"]):  # another train.steps: another learning-rate schedule
            continue
        n = len(q["losses"])
        diffs = [qi - bi for qi, bi in zip(q["losses"][:n], b["losses"][:n], strict=True)]
        last = diffs[-min(10, n) :]
        line = (
            f"- `{name}` vs its bf16 twin `{twin}` over {n} steps: final loss {q['losses'][n - 1]:.4f} vs "
            f"{b['losses'][n - 1]:.4f} ({diffs[-1]:+.4f}, {diffs[-1] / b['losses'][n - 1]:+.2%}); max |gap| "
            f"{max(map(abs, diffs)):.4f} (step {max(range(n), key=lambda i: abs(diffs[i])) + 1}); mean gap over the "
            f"last {len(last)} steps {sum(last) / len(last):+.4f}"
        )
        try:  # the FP8 rule (docs/metrics.md): mean relative gap over the last 20% of the steps
            g = loss_gap.loss_gap(q["losses"], b["losses"])
            line += (
                f"; mean relative gap over steps {g.window_steps[0]}..{g.window_steps[1]} "
                f"{g.mean_relative_gap:+.2%} ({'meets' if g.meets_goal else '**misses**'} |gap| <= {g.goal:.0%})"
            )
        except ValueError as exc:  # too few steps, or a loss that is not finite
            line += f"; no relative gap: {exc}"
        lines.append(line)
    return lines


def cell(text: str, code: bool = False) -> str:
    """Text for one cell of a markdown table: a '|' would start a new cell and a line break a new row (an error
    line from a log can hold either); inside a code span a backtick would end it."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text.replace("`", "'") if code else text


def te_version(rows) -> str | None:
    """TransformerEngine's version in the first of these runs that had it (the rows that need TE)."""
    return next(
        (r["versions"]["transformer-engine"] for r in rows if (r.get("versions") or {}).get("transformer-engine")), None
    )


# The card a batch ran on (run.sh's steps.log names it: `nvidia-smi`'s name) -> the datasheet of its dense BF16
# peak. H100 SXM and H200 share the peak (989 TFLOP/s dense BF16); they differ in memory (80 vs 141 GB) and its
# bandwidth (3.35 vs 4.8 TB/s), so rows of the two cards are never compared with each other.
DEVICE = "NVIDIA H200"
DATASHEETS = {"NVIDIA H200": "H200 datasheet", "NVIDIA H100 80GB HBM3": "H100 SXM datasheet"}


def peak_note(device: str) -> str:
    """The MFU sentence's peak and its source for the card the rows ran on."""
    if device not in DATASHEETS:
        raise SystemExit(f"--device {device!r}: one of {', '.join(DATASHEETS)} (its dense BF16 peak is needed)")
    return f"MFU against 989 dense BF16 TFLOP/s ({DATASHEETS[device]})"


def table(results: dict, device: str = DEVICE) -> str:
    presets = results["presets"]
    any_ok = next((r for r in presets.values() if r.get("versions")), {})
    v = any_ok.get("versions") or {}
    te = te_version(presets.values())
    checks = loss_checks(results)
    lines = [
        f"Measured {any_ok.get('date', '?')} on one {v.get('platform', '?')} host with one {device} "
        f"(hardware=h200), `moekit train experiment={results['experiment']}` + the preset's overrides; "
        f"versions: python {v.get('python')}, jax {v.get('jax')}, jaxlib {v.get('jaxlib')}, flax {v.get('flax')}, "
        f"maxtext {v.get('maxtext')}, tokamax {v.get('tokamax')}, moekit {v.get('moekit')}"
        f"{f', transformer-engine {te} (in the runs of the rows that need it)' if te else ''}. s/step, TFLOP/s and "
        "tokens/s: median over the steady steps (moekit's summary, docs/metrics.md); TFLOP/s is MaxText's count; "
        f"{peak_note(device)}. Peak memory: the allocator's peak_bytes_in_use; "
        "estimate: MaxText's compile-time total. "
        f"Loss check: every step within {tuning.RTOL:g} relative of `{results['reference']}`.",
        "",
        "| preset | overrides | status | s/step | TFLOP/s/dev | MFU | tokens/s/dev | peak GiB | estimate GiB "
        "| loss check | final loss |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    for name, r in presets.items():
        ov = " ".join(o for o in r["overrides"] if not o.startswith(("experiment=", "train.steps=")))
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {cell(r.get('error', '')[:80])}"
        loss = r.get("losses") or [None]
        lines.append(
            f"| {cell(name)} | `{cell(ov, code=True) or '-'}` | {status} | {f(r.get('step_time_s'), '.3f')} "
            f"| {f(r.get('tflops_per_device'), '.1f')} | {f(r.get('mfu_bf16'), '.1%')} "
            f"| {f(r.get('tokens_per_s_per_device'), '.0f')} | {f(r.get('peak_memory_gib'), '.1f')} "
            f"| {f(r.get('compiled_estimate_gib'), '.1f')} | {checks[name]} | {f(loss[-1], '.4f')} |"
        )
    gaps = loss_gaps(results)
    if gaps:
        lines += ["", "Loss gap of each quantized preset to bf16 (same path, tokens/step, seed and data):", *gaps]
    return "\n".join(lines)


def profile_table(results: dict | list[dict], device: str = DEVICE) -> str:
    """The profiled presets' mean traced step: ms per bucket (share), idle, communication shares, overhead. Several
    results (one per experiment: a family's breakdown each) make one table whose rows name their experiment."""
    from moekit.observe.profiles.profile_rules import BUCKETS

    runs = results if isinstance(results, list) else [results]
    several = len(runs) > 1
    profiled = {
        (f"{res['experiment']}: {n}" if several else n): r
        for res in runs
        for n, r in res["presets"].items()
        if (r.get("profile") or {}).get("buckets_ms")
    }
    if not profiled:
        return ""
    used = [(b, label) for b, label, _ in BUCKETS if any(r["profile"]["buckets_ms"].get(b) for r in profiled.values())]
    any_ok = next(iter(profiled.values()))
    v = any_ok.get("versions") or any_ok["profile"].get("versions") or {}
    date = any_ok.get("date") or any_ok["profile"].get("date") or runs[0].get("started", "?")[:10]
    what = "<proxy>" if several else runs[0]["experiment"]
    versions = (
        f"jax {v.get('jax')}, maxtext {v.get('maxtext')}, tokamax {v.get('tokamax')}, moekit {v.get('moekit')}"
        f"{', transformer-engine ' + v['transformer-engine'] if v.get('transformer-engine') else ''}"
        if v
        else "versions not in these records: see the runs' profile.json"
    )
    lines = [
        f"Measured {date} on one {device} with hardware={any_ok['profile'].get('hardware')}"
        f"{' (' + v['host'] + ')' if v.get('host') else ''}, `moekit train "
        f"experiment={what} profile=on` + the preset's overrides ({versions}): the mean "
        "traced step over the run's traced steps, from its profile.json (docs/profiling.md). ms (share of the step). "
        "Overhead: median of the profiled run's untraced steady steps against the untraced baseline run's median, "
        "same batch.",
        "",
        "| preset | traced step ms | " + " | ".join(label for _, label in used) + " | idle | comm share of kernel time "
        "| comm hidden | overhead | segmentation |",
        "|---|---|" + "---|" * len(used) + "---|---|---|---|---|",
    ]

    def pct(x):
        return "-" if x is None else f"{x:.1%}"

    for name, r in profiled.items():
        p = r["profile"]
        step = p["traced_step_ms"] or 1.0
        cells = [f"{p['buckets_ms'].get(b, 0.0):.1f} ({p['buckets_ms'].get(b, 0.0) / step:.0%})" for b, _ in used]
        overhead = "-" if p.get("overhead") is None else f"{p['overhead']:+.1%}"
        idle = f"{p['idle_ms']:.1f} ({p['idle_ms'] / step:.0%})"
        lines.append(
            f"| {name} | {p['traced_step_ms']:.1f} | {' | '.join(cells)} | {idle} "
            f"| {pct(p['communication_share_of_kernel_time'])} | {pct(p['collective_hidden_share'])} | {overhead} "
            f"| {', '.join(p['segmentation'])} |"
        )
    return "\n".join(lines)


def merged(paths: list[Path]) -> dict:
    """Several presets.json of one benchmark session (several calls on one machine) as one result."""
    results = json.loads(paths[0].read_text())
    for path in paths[1:]:
        more = json.loads(path.read_text())
        if (more["experiment"], more["reference"]) != (results["experiment"], results["reference"]):
            raise SystemExit(f"{path}: another experiment or reference than {paths[0]}")
        results["presets"] |= more["presets"]
    return results


def _fill(text: str, begin_mark: str, end_mark: str, body: str, doc: Path) -> str:
    begin, end = text.find(begin_mark), text.find(end_mark)
    if begin < 0 or end < 0:
        raise SystemExit(f"{doc} has no {begin_mark} ... {end_mark} section to fill")
    return text[: begin + len(begin_mark)] + "\n" + body + "\n" + text[end:]


def markers(section: str = "", kind: str = "presets", script: str = "run_presets.py") -> tuple[str, str]:
    """Where a `kind` table goes in the doc: the main one, or a named one of its own (a batch whose rows are not
    merged with the main table's: another machine, another loss-check reference)."""
    if section and not section.replace("_", "").replace("-", "").isalnum():
        raise SystemExit(f"--section {section!r}: letters, digits, '_' and '-' only")
    name, flag = (f"{kind} {section}", f" --section {section}") if section else (kind, "")
    return f"<!-- BEGIN {name} (benchmarks/{script} --record{flag}) -->", f"<!-- END {name} -->"


def doc_for(begin_mark: str, docs: Path = REPO / "docs") -> Path:
    """The page that holds a recorded table's section: docs/performance.md (the index) or one of docs/performance/
    (one page per campaign); each section stands on exactly one (tests/test_performance_docs.py)."""
    pages = [docs / "performance.md", *sorted((docs / "performance").glob("*.md"))]
    found = [p for p in pages if p.is_file() and begin_mark in p.read_text()]
    if not found:
        raise SystemExit(f"{begin_mark} stands on no page of {docs}/performance.md or {docs}/performance/: add it, and "
                         "its END line, to the page the table belongs on")
    if len(found) > 1:
        raise SystemExit(f"{begin_mark} stands on {len(found)} pages ({', '.join(map(str, found))}): keep it on one")
    return found[0]


def record(results_paths: list[Path], doc: Path | None = None, section: str = "", device: str = DEVICE) -> Path:
    """The presets table, or (for results of --profile runs) the breakdown table, into its section of `doc` (by
    default the page holding that section). A breakdown section of its own takes the results of several experiments
    (one row each). Returns the page written."""
    runs = [json.loads(p.read_text()) for p in results_paths]
    if section and all(profile_table(r) for r in runs):
        marks, body = markers(section, "profile"), profile_table(runs, device)
    else:
        results = merged(results_paths)
        profiles = profile_table(results, device)
        main = ((PROFILE_BEGIN, PROFILE_END), profiles) if profiles else (markers(section), table(results, device))
        marks, body = main
    doc = doc or doc_for(marks[0])
    doc.write_text(_fill(doc.read_text(), *marks, body, doc))
    return doc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="folder for the run directories and presets.json")
    p.add_argument(
        "--presets", default=",".join(PRESETS), help=f"comma list of: {', '.join(PRESETS)}, or NAME:OVERRIDE+OVERRIDE"
    )
    p.add_argument("--row", action="append", default=[], help="a further row NAME='OVERRIDES' (repeatable)")
    p.add_argument("--reference", default=REFERENCE, help="the row the loss check compares with")
    p.add_argument("--profile", action="store_true", help="train each preset with profile=on (step-time breakdown)")
    p.add_argument("--baseline", help="with --profile: also train this preset untraced (the overhead reference)")
    p.add_argument("--append", action="store_true", help="add to DIR/presets.json (a later call of one batch)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--timeout-s", type=float, default=180, help="per preset")
    p.add_argument("--experiment", default=EXPERIMENT)
    p.add_argument("--record", type=Path, nargs="+", help="presets.json file(s) of one session to render into --doc")
    p.add_argument("--doc", type=Path, help="the page to write (default: the page holding the section)")
    p.add_argument("--section", default="", help="with --record: fill the presets table of this name, not the main one")
    p.add_argument("--device", default=DEVICE, help=f"with --record: the card ({', '.join(DATASHEETS)})")
    a = p.parse_args()
    if a.record:
        print(f"recorded into {record(a.record, a.doc, a.section, a.device)} (next: scripts/performance_docs.py)")
        return 0
    if not a.out:
        p.error("--out is required to run")
    if a.baseline and not a.profile:
        p.error("--baseline is the untraced reference of --profile runs")
    rows = parse_rows([n for n in a.presets.split(",") if n], a.row)
    path = run(a.out, rows, a.steps, a.timeout_s, a.experiment, a.reference, a.profile, a.baseline, a.append)
    results = json.loads(path.read_text())
    print(table(results))
    if a.profile:
        print("\n" + profile_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
