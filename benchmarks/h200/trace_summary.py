"""Where a traced training step's device time goes, by JAX named scope, from an xplane.pb (jax.profiler).

    python benchmarks/h200/trace_summary.py RUN_DIR --steps N [--gemm-tflop-per-step T] [--out FILE.json]

Reads the one *.xplane.pb under RUN_DIR (MaxText's profiler=xplane writes it under tensorboard/) with
jax.profiler.ProfileData (no TensorFlow needed). Every GPU kernel is put in the first scope whose name
appears in its stats (XLA labels kernels with the op's name stack): moekit's grouped GEMM, the rest of moekit's
ragged_dot layout, MaxText's token sort (sort_activations) and combine (weight_sum); the rest is "other".
It also lists the kernels and streams that take the most time, so a trace whose kernels carry no scope names
can still be read. With --gemm-tflop-per-step, the grouped GEMM's TFLOP/s inside training is reported.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

SCOPES = {  # label -> name-stack fragment (first match wins)
    "grouped_gemm": "moekit_grouped_gemm",
    "ragged_dot_layout": "moekit_ragged_dot",
    "sort (permute/unpermute)": "sort_activations",
    "combine (weight_sum)": "weight_sum",
}
# Lines a trace viewer derives from the kernels (they would count every kernel twice), when a trace has them.
DERIVED = ("XLA Modules", "XLA Ops", "XLA TraceMe", "Steps", "Framework", "Source code", "Launch Stats")


def summarize(xplane: Path, steps: int, gemm_tflop_per_step: float | None = None, top: int = 12) -> dict:
    from jax.profiler import ProfileData

    data = ProfileData.from_file(str(xplane))
    planes = [p for p in data.planes if p.name.startswith("/device:GPU")] or [
        p for p in data.planes if p.name.startswith("/host:CPU")
    ]
    by_scope: dict[str, float] = defaultdict(float)
    by_kernel: dict[str, float] = defaultdict(float)
    by_stream: dict[str, float] = defaultdict(float)
    count = defaultdict(int)
    for plane in planes:
        for line in plane.lines:
            if line.name.startswith(DERIVED):
                continue
            for event in line.events:
                ms = event.duration_ns / 1e6
                text = " ".join(str(v) for _, v in event.stats)
                label = next((k for k, frag in SCOPES.items() if frag in text), "other")
                by_scope[label] += ms
                count[label] += 1
                by_kernel[event.name[:100]] += ms
                by_stream[f"{plane.name} {line.name}"] += ms
    total = sum(by_scope.values())
    out = {
        "trace": str(xplane),
        "planes": [p.name for p in planes],
        "steps": steps,
        "device_ms_per_step": total / steps,
        "by_scope_ms_per_step": {k: v / steps for k, v in sorted(by_scope.items(), key=lambda kv: -kv[1])},
        "kernels_by_scope": dict(count),
        "top_kernels_ms_per_step": {k: v / steps for k, v in sorted(by_kernel.items(), key=lambda kv: -kv[1])[:top]},
        "streams_ms_per_step": {k: v / steps for k, v in sorted(by_stream.items(), key=lambda kv: -kv[1])[:top]},
    }
    gemm_ms = by_scope.get("grouped_gemm", 0.0) / steps
    if gemm_tflop_per_step and gemm_ms:
        out["grouped_gemm_tflops"] = gemm_tflop_per_step / (gemm_ms / 1e3)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--steps", type=int, required=True, help="steps the trace covers (MaxText's profiler_steps)")
    p.add_argument("--gemm-tflop-per-step", type=float, help="FLOPs of the routed-expert GEMMs per step, in TFLOP")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    traces = sorted(a.run_dir.rglob("*.xplane.pb"))
    if not traces:
        print(f"no *.xplane.pb under {a.run_dir}", file=sys.stderr)
        return 1
    result = summarize(traces[-1], a.steps, a.gemm_tflop_per_step)
    text = json.dumps(result, indent=2)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
