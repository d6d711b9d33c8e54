"""Run `moekit train experiment=<experiment>` for a set of presets, then record the results with provenance.

    python benchmarks/run_presets.py --out DIR [--presets a,b] [--row NAME='OVERRIDES' ...] [--steps N] [--timeout-s S]
    python benchmarks/run_presets.py --record DIR/presets.json [MORE.json]   # table -> docs/performance.md

Each preset is a real `moekit train` in DIR/<preset>/ (config, command, versions, metrics, summary). Peak
device memory comes from benchmarks/peakmem (the allocator's high-water mark, read at exit). The loss check
compares each preset's loss trajectory with REFERENCE's at the same tokens per step (moekit.tuning's gate).
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

from moekit import trial, tuning  # noqa: E402
from moekit.config.checks import ensure_valid  # noqa: E402
from moekit.config.compose import compose  # noqa: E402

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
}
MARK_BEGIN, MARK_END = "<!-- BEGIN presets (benchmarks/run_presets.py --record) -->", "<!-- END presets -->"


def parse_rows(names: list[str], extra: list[str]) -> dict[str, tuple[list[str], str]]:
    """Named presets plus `NAME=OVERRIDES` rows (overrides separated by spaces), in the order given."""
    rows = {name: PRESETS[name] for name in names}
    for spec in extra:
        name, sep, overrides = spec.partition("=")
        if not sep or not name or name in rows:
            raise SystemExit(f"--row {spec!r}: give NAME=OVERRIDES with a new name, e.g. --row te_gmm='moe=te_gmm'")
        rows[name] = (overrides.split(), f"`{overrides}`")
    return rows


def plan_rows(rows: dict[str, tuple[list[str], str]], steps: int, experiment: str) -> dict[str, tuple[list, dict]]:
    """Every row composed and checked (moekit's checks) before any runs: name -> (overrides, config)."""
    plans = {}
    for name, (extra, _) in rows.items():
        overrides = [f"experiment={experiment}", f"train.steps={steps}", *extra]
        plans[name] = (overrides, ensure_valid(compose(overrides)).to_dict())
    return plans


def run(
    out: Path,
    rows: dict[str, tuple[list[str], str]],
    steps: int,
    timeout_s: float,
    experiment: str,
    reference: str = REFERENCE,
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plans = plan_rows(rows, steps, experiment)
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
    for name, (overrides, cfg) in plans.items():
        print(f"== {name}: moekit train {' '.join(overrides)}", flush=True)
        r = trial.run(overrides, out / name, timeout_s, env)
        r |= {"what": rows[name][1], "batch": list(tuning.batch_key(cfg))}
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
        else:
            ok, diff, bad = tuning.compare_losses(ref["losses"], r["losses"])
            out[name] = f"ok (max diff {diff:.1e})" if ok else f"**diverges** at step {bad} (max diff {diff:.3f})"
    return out


def table(results: dict) -> str:
    presets = results["presets"]
    any_ok = next((r for r in presets.values() if r.get("versions")), {})
    v = any_ok.get("versions") or {}
    te = next(
        (
            r["versions"]["transformer-engine"]
            for r in presets.values()
            if (r.get("versions") or {}).get("transformer-engine")
        ),
        None,
    )
    checks = loss_checks(results)
    lines = [
        f"Measured {any_ok.get('date', '?')} on one {v.get('platform', '?')} host with one NVIDIA H200 "
        f"(hardware=h200), `moekit train experiment={results['experiment']}` + the preset's overrides; "
        f"versions: python {v.get('python')}, jax {v.get('jax')}, jaxlib {v.get('jaxlib')}, flax {v.get('flax')}, "
        f"maxtext {v.get('maxtext')}, tokamax {v.get('tokamax')}, moekit {v.get('moekit')}"
        f"{f', transformer-engine {te} (in the runs of the rows that need it)' if te else ''}. s/step, TFLOP/s and "
        "tokens/s: median after warm-up (moekit's summary); TFLOP/s is MaxText's count; MFU against 989 dense "
        "BF16 TFLOP/s (H200 datasheet). Peak memory: the allocator's peak_bytes_in_use; estimate: MaxText's "
        f"compile-time total. Loss check: every step within {tuning.RTOL:g} relative of `{results['reference']}`.",
        "",
        "| preset | overrides | status | s/step | TFLOP/s/dev | MFU | tokens/s/dev | peak GiB | estimate GiB "
        "| loss check | final loss |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    for name, r in presets.items():
        ov = " ".join(o for o in r["overrides"] if not o.startswith(("experiment=", "train.steps=")))
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('error', '')[:80]}"
        loss = r.get("losses") or [None]
        lines.append(
            f"| {name} | `{ov or '-'}` | {status} | {f(r.get('step_time_s'), '.3f')} "
            f"| {f(r.get('tflops_per_device'), '.1f')} | {f(r.get('mfu_bf16'), '.1%')} "
            f"| {f(r.get('tokens_per_s_per_device'), '.0f')} | {f(r.get('peak_memory_gib'), '.1f')} "
            f"| {f(r.get('compiled_estimate_gib'), '.1f')} | {checks[name]} | {f(loss[-1], '.4f')} |"
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


def record(results_paths: list[Path], doc: Path) -> None:
    results = merged(results_paths)
    text = doc.read_text()
    begin, end = text.find(MARK_BEGIN), text.find(MARK_END)
    if begin < 0 or end < 0:
        raise SystemExit(f"{doc} has no {MARK_BEGIN} ... {MARK_END} section to fill")
    doc.write_text(text[: begin + len(MARK_BEGIN)] + "\n" + table(results) + "\n" + text[end:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="folder for the run directories and presets.json")
    p.add_argument("--presets", default=",".join(PRESETS), help=f"comma list of: {', '.join(PRESETS)}")
    p.add_argument("--row", action="append", default=[], help="a further row NAME='OVERRIDES' (repeatable)")
    p.add_argument("--reference", default=REFERENCE, help="the row the loss check compares with")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--timeout-s", type=float, default=180, help="per preset")
    p.add_argument("--experiment", default=EXPERIMENT)
    p.add_argument("--record", type=Path, nargs="+", help="presets.json file(s) of one session to render into --doc")
    p.add_argument("--doc", type=Path, default=REPO / "docs" / "performance.md")
    a = p.parse_args()
    if a.record:
        record(a.record, a.doc)
        return 0
    names = [n for n in a.presets.split(",") if n]
    unknown = [n for n in names if n not in PRESETS]
    if unknown or not a.out:
        p.error(f"unknown presets {unknown}" if unknown else "--out is required to run")
    path = run(a.out, parse_rows(names, a.row), a.steps, a.timeout_s, a.experiment, a.reference)
    print(table(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
