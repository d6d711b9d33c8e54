"""Does the gain carry over? The same rows on each MoE family's one-GPU proxy, recorded as one table.

    python benchmarks/run_portability.py --dry-run [--families qwen3,mixtral] [--rows dense,tokamax] [--row N='O']
    python benchmarks/run_portability.py --out DIR [--families ...] [--rows ...] [--row te_gmm='moe=te_gmm'] [--steps N]
    python benchmarks/run_portability.py --record DIR/portability.json [MORE.json]   # table -> its page
    python benchmarks/run_portability.py --record DIR/portability.json --section NAME   # a table of its own
    (a family in several files: its rows are merged, the first file's baseline row stays the baseline)

A family is its proxy experiment (conf/experiment/<family>_proxy_h200.yaml: full layer widths, the per-GPU expert
count of the family's cluster layout, few layers). A row is one of run_presets.py's presets or NAME='OVERRIDES';
the first row is the family's baseline: the speed-up is the row's tokens/s over its, only for rows of the same tokens
per step (others say why not), and the loss check compares every row with it (moekit.series.tuning's gate). Each run is
a real `moekit train` in DIR/<family>/<row>/. --dry-run composes and checks every run, estimates its device memory
(moekit plan) and the batch's GPU time, and launches nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))
import moekit_python  # noqa: E402, F401 (re-runs this script with .venv/bin/python when this Python lacks moekit's stack)
import run_presets  # noqa: E402

from moekit import plan  # noqa: E402
from moekit.config.compose import compose  # noqa: E402
from moekit.observe.reports import comparable  # noqa: E402
from moekit.plan import calibrate, tables  # noqa: E402
from moekit.plan.model import Dims  # noqa: E402
from moekit.series import tuning  # noqa: E402

FAMILIES = {  # name -> proxy experiment
    "dsv3": "dsv3_proxy_h200",
    "qwen3": "qwen3_235b_proxy_h200",
    "mixtral": "mixtral_8x22b_proxy_h200",
    "dsv2_lite": "dsv2_lite_proxy_h200",
    "gpt_oss": "gpt_oss_120b_proxy_h200",
    "llama4": "llama4_maverick_proxy_h200",
}
DEFAULT_FAMILIES = "qwen3,mixtral"
DEFAULT_ROWS = "dense,tokamax"

# GPU-time estimate per run: start-up and compilation (the brief of this benchmark: ~60 s to compile; smoke_gpu's
# first 73 s on one H200, docs/performance.md), then steps at rates calibrated on dsv3_proxy_h200's measured steps
# (run B, one H200, 2026-12-03: tokamax 1.526 s, dense 1.868 s for 428.4 TFLOP of MaxText's count).
START_S, COMPILE_S = 20.0, 60.0


def flops(cfg) -> tuple[float, float]:
    """(MaxText's training TFLOP per step, the routed experts' part of it) for one device."""
    dims = Dims.from_values(calibrate.values_of(cfg))
    routed = 3 * dims.moe_layers * 2 * dims.tokens * dims.top_k * dims.mlp_params(dims.moe_mlp)
    return dims.train_flops() / 1e12, routed / 1e12


def _rates() -> tuple[float, float]:
    """TFLOP/s of the grouped path and of the dense path's actual work, fitted on the dsv3 proxy's run B."""
    total, routed = flops(compose(["experiment=dsv3_proxy_h200"]))
    cfg = compose(["experiment=dsv3_proxy_h200"])
    every = cfg.model.num_experts / cfg.model.experts_per_token  # dense computes every expert for every token
    return total / 1.526, (total - routed + routed * every) / 1.868


def estimate_s(cfg, steps: int, rates: tuple[float, float]) -> float:
    total, routed = flops(cfg)
    grouped_rate, dense_rate = rates
    if cfg.moe.backend == "dense":
        step = (total - routed + routed * cfg.model.num_experts / cfg.model.experts_per_token) / dense_rate
    else:
        step = total / grouped_rate
    return START_S + COMPILE_S + steps * step


def device_gib(cfg) -> tuple[float, float]:
    """moekit plan's device-memory estimate and the usable memory of one device, GiB."""
    out = plan.build(cfg, tables.shipped())
    return out["memory"]["device_gib"], out["memory"]["device_limit_gib"] or float("nan")


def dry_run(families: list[str], rows: dict, steps: int, timeout_s: float) -> int:
    rates, total = _rates(), 0.0
    print(f"# portability benchmark: {len(families)} families x {len(rows)} rows, {steps} steps each (dry run)")
    for family in families:
        experiment = FAMILIES[family]
        plans = run_presets.plan_rows(rows, steps, experiment)  # composes and runs moekit's checks
        family_s = 0.0
        for name, (overrides, _) in plans.items():
            cfg = compose(overrides)
            est = min(estimate_s(cfg, steps, rates), timeout_s)
            need, limit = device_gib(cfg)
            family_s += est
            fits = "fits" if need <= limit else "DOES NOT FIT"
            memory = f"{need:5.1f} of {limit:.0f} GiB ({fits})"
            print(f"  {family:9} {name:12} ~{est:4.0f} s  {memory}  moekit train {' '.join(overrides)}")
        print(f"  {family:9} {'(family)':12} ~{family_s:4.0f} s")
        total += family_s
    per_run = f"start {START_S:.0f} s + compile {COMPILE_S:.0f} s per run + steps"
    print(f"# estimated GPU time: ~{total / 60:.1f} min ({per_run}); device memory: moekit plan's estimate")
    return 0


def run(out: Path, families: list[str], rows: dict, steps: int, timeout_s: float) -> Path:
    for family in families:  # every run of every family composes and passes the checks before the first starts
        run_presets.plan_rows(rows, steps, FAMILIES[family])
    baseline = next(iter(rows))
    path, results = out / "portability.json", {}
    out.mkdir(parents=True, exist_ok=True)
    for family in families:
        print(f"=== {family}: experiment={FAMILIES[family]}", flush=True)
        done = run_presets.run(out / family, rows, steps, timeout_s, FAMILIES[family], reference=baseline)
        results[family] = json.loads(done.read_text())
        path.write_text(json.dumps(results, indent=2) + "\n")  # after every family: a cut-off batch keeps the rest
    return path


def table(results: dict, device: str = run_presets.DEVICE) -> str:
    first = next((r for fam in results.values() for r in fam["presets"].values() if r.get("versions")), {})
    v = first.get("versions") or {}
    te = run_presets.te_version(r for fam in results.values() for r in fam["presets"].values())
    te_note = f", transformer-engine {te} (in the runs of the rows that need it)" if te else ""
    # A table merged from calls of several days says which families each date measured (never the first date alone).
    days: dict[str, list[str]] = {}
    for family, res in results.items():
        for r in res["presets"].values():
            if r.get("date") and family not in days.setdefault(r["date"], []):
                days[r["date"]].append(family)
    when = (
        " and ".join(f"{d} ({', '.join(fams)})" for d, fams in sorted(days.items())) + ", merged from several calls,"
        if len(days) > 1
        else first.get("date", "?")
    )
    lines = [
        f"Measured {when} on one {device} (hardware=h200), `moekit train experiment=<proxy>` "
        f"+ the row's overrides, one benchmark run per family (benchmarks/run_portability.py); versions: python "
        f"{v.get('python')}, jax {v.get('jax')}, maxtext {v.get('maxtext')}, tokamax {v.get('tokamax')}, moekit "
        f"{v.get('moekit')}{te_note}. s/step and TFLOP/s/device: median over the steady steps (docs/metrics.md); "
        f"TFLOP/s is MaxText's count; {run_presets.peak_note(device)}. Speed-up: the row's "
        "tokens/s/device over the family's baseline row's, only at the same tokens per step and outside the noise "
        "the two runs measured (docs/metrics.md, \"Comparing runs\"). Loss check: every step "
        f"within {run_presets.tuning.RTOL:g} relative of the baseline row.",
        "",
        "| family | proxy | row | overrides | status | s/step | TFLOP/s/dev | MFU | speed-up | loss check |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    for family, res in results.items():
        checks, base = run_presets.loss_checks(res), res["presets"].get(res["reference"], {})
        for name, r in res["presets"].items():
            ov = " ".join(o for o in r["overrides"] if not o.startswith(("experiment=", "train.steps=")))
            status = (
                r["status"] if r["status"] == "ok" else run_presets.cell(f"{r['status']}: {r.get('error', '')[:80]}")
            )
            # Only between runs of the same tokens per step (the family's proxy fixes the model); else why not.
            # A speed-up only beyond the noise the two runs measured (observe/reports/comparable.py's rule).
            same = r.get("batch") is not None and r.get("batch") == base.get("batch")
            if r is base:
                speed = "baseline"
            elif r.get("status") != "ok":
                speed = "-"
            elif base.get("status") != "ok":
                speed = "n/a (the baseline row failed)"
            elif same:
                speed = comparable.rates(tuning.measured(base), tuning.measured(r)).text()
            else:
                speed = "n/a (other tokens/step)"
            lines.append(
                f"| {family} | `{res['experiment']}` | {name} | `{run_presets.cell(ov, code=True) or '-'}` | {status} "
                f"| {f(r.get('step_time_s'), '.3f')} | {f(r.get('tflops_per_device'), '.1f')} "
                f"| {f(r.get('mfu_bf16'), '.1%')} | {speed} | {checks[name]} |"
            )
    return "\n".join(lines)


def merge(parts: list[dict]) -> dict:
    """One table from several batches: a family met again gains the later batch's rows (same name: the later
    run); its baseline stays the one of the first batch that measured the family."""
    results: dict = {}
    for part in parts:
        for family, res in part.items():
            if family in results:
                results[family]["presets"] |= res["presets"]
            else:
                results[family] = res
    return results


def record(paths: list[Path], doc: Path | None = None, section: str = "", device: str = run_presets.DEVICE) -> Path:
    """The merged table of `paths` into the portability section (or the named one of its own) of `doc`, by default
    the page holding that section. Returns the page written."""
    results = merge([json.loads(p.read_text()) for p in paths])
    marks = run_presets.markers(section, "portability", "run_portability.py")
    doc = doc or run_presets.doc_for(marks[0])
    doc.write_text(run_presets._fill(doc.read_text(), *marks, table(results, device), doc))
    return doc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="folder for the run directories and portability.json")
    p.add_argument("--families", default=DEFAULT_FAMILIES, help=f"comma list of: {', '.join(FAMILIES)}")
    p.add_argument(
        "--rows", default=DEFAULT_ROWS, help="comma list of run_presets.py presets; the first is the baseline"
    )
    p.add_argument("--row", action="append", default=[], help="a further row NAME='OVERRIDES' (repeatable)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--timeout-s", type=float, default=180, help="per run")
    p.add_argument("--dry-run", action="store_true", help="compose, check and estimate every run; launch nothing")
    p.add_argument("--record", type=Path, nargs="+", help="portability.json file(s) to render into --doc")
    p.add_argument("--doc", type=Path, help="the page to write (default: the page holding the section)")
    p.add_argument("--section", default="", help="with --record: fill the table of this name, not the main one")
    p.add_argument("--device", default=run_presets.DEVICE, help="with --record: the card the rows ran on")
    a = p.parse_args()
    if a.record:
        print(f"recorded into {record(a.record, a.doc, a.section, a.device)} (next: scripts/performance_docs.py)")
        return 0
    families = [f for f in a.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES] + [
        r for r in a.rows.split(",") if r and r not in run_presets.PRESETS
    ]
    if unknown:
        p.error(f"unknown families or rows: {unknown}")
    rows = run_presets.parse_rows([r for r in a.rows.split(",") if r], a.row)
    if not rows:
        p.error("no rows: give --rows and/or --row")
    if a.dry_run:
        return dry_run(families, rows, a.steps, a.timeout_s)
    if not a.out:
        p.error("--out is required to run (or --dry-run)")
    path = run(a.out, families, rows, a.steps, a.timeout_s)
    print(table(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
