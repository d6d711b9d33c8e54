"""The markdown report over one or more runs (pure: loaded runs and reference data in, text out).

Measured numbers (the runs) and reference numbers (published, or an experiment's `expect:` block) sit in
separate tables; a reference row always names its kind and source. docs/metrics.md defines every column.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from moekit.observe.profiles.profile_rules import BUCKETS
from moekit.observe.reports import comparable, fabric_report
from moekit.observe.runs import summary
from moekit.observe.runs.rundata import Run

VERSION_KEYS = ("jax", "maxtext", "transformer-engine", "tokamax")


def labels(runs: Sequence[Run]) -> list[str]:
    """Name each run by the overrides that set it apart from the others (its directory when none do)."""
    common = set.intersection(*(set(r.overrides) for r in runs)) if len(runs) > 1 else set()
    out = []
    for r in runs:
        own = [o for o in r.overrides if o not in common]
        out.append(" ".join(own) if own else r.path.name)
    if len(set(out)) < len(out):  # identical settings: the directory tells them apart
        out = [f"{label} ({r.path.name})" for label, r in zip(out, runs, strict=True)]
    return out


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table; a `|` inside a cell is escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _mfu(r: Run, dtype: str) -> str:
    v = r.summary["mfu"].get(dtype)
    peak = (r.hardware.get("peak_tflops") or {}).get(dtype)
    if v is None:
        return "n/a"
    shown = f"{v:.1%} of {peak:g}"
    if dtype in impossible_mfu(r):
        shown += " (over 100%: not possible, see notes)" if v > 1 else " (not possible, see notes)"
    return shown


def impossible_mfu(r: Run) -> list[str]:
    """The dtypes whose MFU no run can have: over 100% (more than the hardware's peak) or not above 0 (a peak that
    is not a positive number); the peak (hardware=) or the FLOP count is wrong for this run."""
    return [k for k, v in (r.summary.get("mfu") or {}).items() if v is not None and not 0 < v <= 1]


def _versions(r: Run) -> str:
    return ", ".join(f"{k} {r.versions[k]}" for k in VERSION_KEYS if k in r.versions) or "unrecorded"


def _finite(value: Any) -> bool:
    """Whether a metric is a finite number (a missing or non-numeric one is not judged here)."""
    return not isinstance(value, (int, float)) or math.isfinite(value)


def status(r: Run) -> str:
    """ok, or what went wrong: 'failed: killed (2 of 4 steps)', 'ok (no record of step 5)', 'ok; attempt 1 of 2 was
    killed: ...': a row never hides it.

    Steps done are the steps the records hold (one per step across attempts), never a count of lines."""
    killed = summary.killed_text(r.summary)
    return _status(r) + (f"; {killed}" if killed else "")


def _status(r: Run) -> str:
    m = r.manifest
    planned = int((r.config.get("train") or {}).get("steps") or 0)
    recorded = sorted(int(row["step"]) for row in r.metrics.rows)  # counted, never a range of step numbers
    done = sum(1 for s in recorded if s < planned) if planned else len(recorded)
    partial = f" ({done} of {planned} steps)" if planned and done < planned else ""
    state = m.status or "unrecorded"
    nonfinite = sorted(int(row["step"]) for row in r.metrics.rows if not _finite(row.get(summary.LOSS, 0.0)))
    if nonfinite:  # a run whose loss became NaN or infinite did not train, whatever its processes' exit status
        return f"loss not finite at step(s) {summary.ranges(nonfinite)}{'' if state == 'ok' else f' ({state})'}"
    if state == "ok" and not partial:
        return "ok"
    failure = (m.failure or {}).get("class")
    if state == "ok":
        missing = r.summary.get("missing_steps", []) + r.summary.get("steps_not_run", [])  # no record, or never ran
        return f"ok, no record of step(s) {summary.ranges(missing)}{partial}"
    return f"{state}{': ' + failure if failure else ''}{partial}"


def _steady(s: dict[str, Any], key: str, fmt: str) -> str:
    """A steady-state number, or why there is none."""
    st = s.get("step_time_s")
    if not st:
        return "n/a (too few steady steps)"
    if key == "median":  # the windows' time per step (the rates' own), then the steps' median
        return f"{_num(st.get('per_window'), '.4f')} ({st['median']:.4f})"
    if key == "spread":
        return f"{st['min']:.4f}-{st['max']:.4f}, {st['stdev']:.4f}"
    return _num(s.get(key), fmt)


def runs_table(runs: Sequence[Run], names: Sequence[str]) -> str:
    """One row per run of measured numbers: status, step time and spread (s), throughput, MFU, final loss, versions
    and date."""
    header = [
        "run",
        "experiment",
        "status",
        "hardware",
        "steps (steady)",
        "step time s (windows; median)",
        "spread s (min-max, stdev)",
        "TFLOP/s/device",
        "tokens/s/device",
        "MFU bf16",
        "MFU fp8",
        "final loss",
        "versions",
        "date",
    ]
    rows = []
    for name, r in zip(names, runs, strict=True):
        s = r.summary
        rows.append(
            [
                name,
                str(r.config.get("experiment_name", "?")),
                status(r),
                f"{r.hardware.get('name', '?')} x{r.devices}",
                f"{s['steps']} ({s['steady_steps']})",
                _steady(s, "median", ""),
                _steady(s, "spread", ""),
                _steady(s, "tflops_per_device", ".4g"),
                _steady(s, "tokens_per_s_per_device", ".1f"),
                _mfu(r, "bf16"),
                _mfu(r, "fp8"),
                _num(s["final_loss"], ".4f"),
                _versions(r),
                r.date,
            ]
        )
    return table(header, rows)


BASIS = "tokens/s/device"


TOKENS_KEY = "tokens_per_s_per_device"


def loss_difference(base: Run, other: Run) -> str:
    """other's loss minus base's at the last step both recorded, with that step where it is not both runs' last;
    'n/a (other steps)' when they share no step (a loss after more steps is another point of the curve)."""

    def losses(r: Run) -> dict[int, float]:
        return {int(row["step"]): row[summary.LOSS] for row in r.metrics.rows if _number(row.get(summary.LOSS))}

    a, b = losses(base), losses(other)
    shared = set(a) & set(b)
    if not shared:
        return "n/a (other steps)"
    step = max(shared)
    last = {max(a), max(b)} == {step}
    return f"{b[step] - a[step]:+.2e}" + ("" if last else f" (step {step})")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def comparison_table(runs: Sequence[Run], names: Sequence[str]) -> str:
    """The ablation view: every run against the first one, on tokens/s per device, only where the two runs are
    comparable (observe.reports.comparable: same model, tokens per step and hardware, another training
    configuration, a like host load, a ratio outside the noise measured); elsewhere the cell says why not. The loss
    difference is taken at the last step both runs recorded."""
    base = runs[0]
    header = ["run", "status", "step time s (windows; median)", f"speed-up vs first ({BASIS})", "TFLOP/s/device"]
    header += ["tokens/s/device", "final loss", "loss - first (same step)"]
    rows = []
    for name, r, speed in zip(names, runs, comparable.against_first(runs), strict=True):
        s = r.summary
        dloss = "n/a (another model)" if speed.why == "another model" else loss_difference(base, r)
        rows.append(
            [
                name,
                status(r),
                _steady(s, "median", ""),
                speed.text(),
                _steady(s, "tflops_per_device", ".4g"),
                _steady(s, TOKENS_KEY, ".1f"),
                _num(s.get("final_loss"), ".4f"),
                dloss,
            ]
        )
    return table(header, rows)


def breakdown_columns(runs: Sequence[Run]) -> list[tuple[str, str]]:
    """(bucket, label) of the buckets any profiled run spent time in, in display order, then idle."""
    used = [
        (b, label)
        for b, label, _ in BUCKETS
        if any(((r.profile or {}).get("mean") or {}).get("buckets_s", {}).get(b) for r in runs)
    ]
    return [*used, ("idle", "idle")]


def _ms_share(mean: dict, bucket: str) -> str:
    v = mean["idle_s"] if bucket == "idle" else mean["buckets_s"].get(bucket, 0.0)
    return f"{v * 1e3:.4g} ({v / mean['window_s']:.1%})" if mean.get("window_s") else "n/a"


def breakdown_table(runs: Sequence[Run], names: Sequence[str]) -> str:
    """ms per traced step (share of the step) in each bucket, one row per profiled run (mean over its devices)."""
    cols = breakdown_columns(runs)
    header = ["run", "traced step ms", *[label for _, label in cols], "comm share of kernel time", "comm hidden"]
    rows = []
    for name, r in zip(names, runs, strict=True):
        mean = (r.profile or {}).get("mean")
        if not mean:
            continue
        comm, hidden = mean.get("communication_share_of_kernel_time"), mean.get("collective_hidden_share")
        rows.append(
            [
                name,
                f"{mean['window_s'] * 1e3:.4g}",
                *[_ms_share(mean, b) for b, _ in cols],
                "n/a" if comm is None else f"{comm:.1%}",
                "n/a" if hidden is None else f"{hidden:.1%}",
            ]
        )
    return table(header, rows)


def breakdown_section(runs: Sequence[Run], names: Sequence[str]) -> list[str]:
    """The step-time breakdown heading, explanation and table; empty when no run was profiled."""
    profiled = [(n, r) for n, r in zip(names, runs, strict=True) if r.profile]
    if not profiled:
        return []
    steps = {f"{r.profile['traced_steps'][0]}..{r.profile['traced_steps'][-1]}" for _, r in profiled}
    return [
        "## Step-time breakdown (measured: profile=on traces)",
        "",
        f"Mean traced step (steps {', '.join(sorted(steps))}) over each run's devices, from its profile.json: "
        "ms in each bucket (share of the step). Compute time is shared among the compute operations running at "
        "that instant; communication counts where nothing computes (exposed); idle is time the device runs "
        "nothing. Communication share: collective kernel time over all kernel time; hidden: the part of it "
        "that ran under compute. docs/profiling.md lists the classification rules.",
        "",
        breakdown_table([r for _, r in profiled], [n for n, _ in profiled]),
        "",
    ]


def reference_rows(runs: Sequence[Run], names: Sequence[str], published: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row per (run, reference number) pair that concerns the same model: 'x% of <source>'."""
    rows = []
    for name, r in zip(names, runs, strict=True):
        measured = r.summary["tflops_per_device"]
        if measured is None:
            continue
        where = f"{measured:.4g} ({r.hardware.get('name', '?')} x{r.devices})"
        model = r.config.get("model", {}).get("name")
        refs = []
        for e in published:
            if e["model"] == model:
                at = f"{e['hardware']}" + (f" x{e['gpus']}" if e.get("gpus") else "")
                refs.append(("published", e["tflops_per_gpu"], e["source"], at))
        expect = r.config.get("expect") or {}
        if expect.get("tflops_per_gpu"):
            prov = expect.get("provenance") or {}
            at = f"x{prov['gpus']}" if prov.get("gpus") else "?"
            source = f"{prov.get('source', '?')}".strip()
            refs.append((f"{prov.get('kind', '?')} (experiment expect:)", expect["tflops_per_gpu"], source, at))
        for kind, value, source, at in refs:
            rows.append([name, where, f"{value:g}", kind, at, f"{measured / value:.1%} of {source}"])
    return rows


def references_section(runs: Sequence[Run], names: Sequence[str], published: Sequence[dict[str, Any]]) -> str:
    """The table of runs against reference numbers with its caveat, or a sentence saying no reference concerns these
    runs' model."""
    rows = reference_rows(runs, names, published)
    if not rows:
        models = sorted({str(r.config.get("model", {}).get("name")) for r in runs})
        covered = sorted({e["model"] for e in published})
        return (
            f"No reference number concerns these runs' model ({', '.join(models)}); published numbers cover "
            f"{', '.join(covered) or 'no model'}. Nothing is compared."
        )
    header = ["run", "measured TFLOP/s/device (hardware)", "reference TFLOP/s/GPU", "kind", "reference on", "ratio"]
    note = (
        "Reference numbers are not ours: each row names its source. Each source counts FLOPs its own way, and "
        "hardware, scale and model size may differ from the run's (columns 2 and 5)."
    )
    return table(header, rows) + "\n\n" + note


def notes(runs: Sequence[Run], names: Sequence[str]) -> list[str]:
    """The report's notes: how numbers are computed, each hardware's peak source, and what each run left out, paid
    for checkpoints or did not finish."""
    out = [
        "Step time: the steady windows' wall time per step (the time tokens/s and TFLOP/s are computed from), then "
        "in brackets the median of the steady steps, across all attempts of a resumed run. Left out, by the events "
        "each run recorded (each run below says which steps, docs/metrics.md why): "
        + "; ".join(f"{k}: {v}" for k, v in summary.REASONS.items())
        + ". Fewer than 3 steady steps give no number. TFLOP/s and tokens/s are "
        "MaxText's own per-device counts over the same steps (docs/metrics.md says which FLOPs it counts). "
        "MFU = TFLOP/s/device / the hardware's dense peak.",
    ]
    if len(runs) > 1:
        out.append(
            "Speed-up: tokens/s/device relative to the first run, only for runs of the same model, the same tokens "
            "per step on each device (per-device batch x sequence length) and the same hardware but another training "
            "configuration (keys that only place, watch, check or trace a run do not count: docs/metrics.md), whose "
            f"hosts were as busy (others' share of the CPU within {comparable.LOAD_GAP:.0%}) and whose ratio lies "
            "outside the noise measured on this host: the spread of repeats of one configuration among these runs, "
            "else each run's own steady step times' stdev / median; other runs show why not, with the ratio where "
            "there is one. Never step time. Loss - first: at the last step both runs recorded."
        )
    peaks = {(r.hardware.get("name"), r.hardware.get("peak_source")) for r in runs}
    out += [f"Peaks of {hw}: {src}" for hw, src in sorted(peaks, key=str)]
    for name, r in zip(names, runs, strict=True):
        out.append(f"{name}: left out steps {summary.excluded_text(r.summary)}.")
        ck = r.summary.get("checkpoint")
        if ck:
            rate = _num(ck["with_saves"]["tokens_per_s_per_device"], ".1f")
            out.append(
                f"{name}: {len(ck['steps'])} steps paid a checkpoint save "
                f"({ck['step_time_s']['median']:.4f} s median); with them the run sustained {rate} tokens/s/device."
            )
        if over := impossible_mfu(r):
            out.append(
                f"{name}: MFU {', '.join(over)} is over 100% (or not above 0) of the peak of hardware="
                f"{r.hardware.get('name', '?')}, which no run can have: the run's hardware is not the one its config "
                "names (a CPU or another GPU under hardware=h100, say), its recorded peak is wrong, or MaxText counted "
                "FLOPs this model does not do. Fix: train with the hardware= option of the machine it runs on; do "
                "not quote this MFU."
            )
        if r.metrics.truncated_tail:
            out.append(f"{name}: the last line of {r.metrics.path} was cut off (run killed mid-write); it was skipped.")
        state = _status(r)
        if state != "ok":
            out.append(f"{name}: the run is {state}; its numbers cover only the steps it completed.")
        if killed := summary.killed_text(r.summary):
            out.append(f"{name}: {killed}; its rates come from the steps the attempts recorded, which stand.")
    return out


def markdown(runs: Sequence[Run], published: Sequence[dict[str, Any]], plots: Sequence[str], generated: str) -> str:
    """The whole report: runs, comparison (several runs), breakdown, references, plots and notes."""
    names = labels(runs)
    parts = [
        "# moekit report",
        "",
        f"{generated}. Measured on the hardware named in each row; run directories:",
        "",
        *[f"- {name}: `{r.path}`" for name, r in zip(names, runs, strict=True)],
        "",
        "## Runs (measured)",
        "",
        runs_table(runs, names),
        "",
    ]
    if len(runs) > 1:
        parts += [f"## Comparison (speed-up relative to the first run: {names[0]})", "", comparison_table(runs, names)]
        parts.append("")
    parts += breakdown_section(runs, names)
    parts += fabric_report.section(runs, names, table)
    parts += ["## Against reference numbers", "", references_section(runs, names, published), ""]
    if plots:
        parts += ["## Plots", ""] + [f"![{p.rsplit('.', 1)[0]}]({p})" for p in plots] + [""]
    parts += ["## Notes", ""] + [f"- {n}" for n in notes(runs, names)]
    return "\n".join(parts) + "\n"
