"""profile=on: read a run's traces, break each traced step down per device, write profile.json (effects: files).

Where things are: <run>/profile/trace/process_<i>/plugins/profile/<time>/<host>.xplane.pb (one per process) and
<run>/profile/hlo/process_<i>/ (XLA's dump of the train step), both written by the processes (moekit.worker).
docs/profiling.md explains the buckets, the rules and how CPU and GPU traces differ.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
import time
import warnings
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.observe.profiles import breakdown, hlo, trace
from moekit.observe.profiles.profile_rules import BUCKETS, KIND, Op, classify, is_container, is_gemm_kernel
from moekit.observe.profiles.trace import Event
from moekit.observe.runs import metrics, steady

TRACE_DIR = "trace"
HLO_DIR = "hlo"
_PROCESS = re.compile(r"^process_(\d+)$")
TOP_OPS = 25  # the largest operations with their bucket and rule: what to check a new platform's rules against
TOP_UNCLAIMED = 12


class ProfileError(Exception):
    """Nothing to break down (no trace was written, or none could be read)."""


def find_traces(run: Path) -> dict[int, list[Path]]:
    """process index -> its .xplane.pb files; MaxText's own tensorboard folder when the per-process one is absent."""
    root = run / rundir.PROFILE_DIR / TRACE_DIR
    found: dict[int, list[Path]] = {}
    if root.is_dir():
        for folder in sorted(root.iterdir()):
            m = _PROCESS.match(folder.name)
            if m:
                found[int(m.group(1))] = sorted(folder.glob("plugins/profile/*/*.xplane.pb"))
    if not any(found.values()):
        loose = sorted(run.glob("*/tensorboard/plugins/profile/*/*.xplane.pb"))
        found = {i: [p] for i, p in enumerate(loose)}
    return {p: files for p, files in found.items() if files}


def executions(events: Sequence[Event], expected: int) -> tuple[list[list[Event]], str]:
    """One list of events per execution of the train step, and how they were told apart.

    XLA:CPU tags every thunk with its execution (run_id). GPU kernels carry no such id: an instruction that runs
    exactly `expected` times (once per step, outside any loop) marks where each execution starts; failing that, the
    whole traced window is one group (its times are then divided by `expected`).
    """
    if events and all(e.run_id is not None for e in events):
        groups: dict[int, list[Event]] = defaultdict(list)
        for e in events:
            groups[e.run_id].append(e)
        return sorted(groups.values(), key=lambda g: min(e.start_ns for e in g)), "run_id"
    ordered = sorted(events, key=lambda e: e.start_ns)
    starts: dict[str, list[float]] = defaultdict(list)
    for e in ordered:
        starts[e.hlo_op or e.name].append(e.start_ns)
    once = [ts for ts in starts.values() if len(ts) == expected]
    if expected > 1 and once:
        marks = min(once, key=lambda ts: ts[0])
        groups_list: list[list[Event]] = [[] for _ in marks]
        i = 0
        for e in ordered:
            while i + 1 < len(marks) and e.start_ns >= marks[i + 1]:
                i += 1
            if e.start_ns >= marks[0]:
                groups_list[i].append(e)
        return groups_list, "once-per-step instruction"
    return [ordered], "whole window" if expected > 1 else "one step"


def _op(
    e: Event,
    table: dict[str, hlo.Instruction],
    kernels: dict[str, hlo.Instruction],
    buffers: dict[str, tuple[str, ...]],
) -> Op:
    ins = table.get(e.hlo_op) or kernels.get(e.name)  # a command buffer's kernel: its name says the instruction
    if ins is None and is_gemm_kernel(e.name):
        ins = _buffer_gemm(e, table, buffers.get(e.hlo_op, ()))
    if ins is None:  # undumped: what the trace itself says
        return Op(kernel=e.name, hlo_op=e.hlo_op, op_name=e.op_name, details=e.details)
    return Op(e.name, ins.name, ins.opcode, ins.fused, ins.target, ins.op_name, ins.frames, e.details)


def _buffer_gemm(e: Event, table: dict[str, hlo.Instruction], gemms: tuple[str, ...]) -> hlo.Instruction | None:
    """A cuBLAS kernel inside a command buffer names no instruction: the buffer's GEMMs decide when they agree.

    One GEMM: that instruction. Several in one bucket: the first, under the buffer's name (which of them ran is
    not known). Several buckets (attention's PV next to a projection): none, it stays a GEMM of unknown origin.
    """
    found = [table[g] for g in gemms if g in table]
    if not found or len(found) < len(gemms):
        return None
    ops = [Op(e.name, i.name, i.opcode, i.fused, i.target, i.op_name, i.frames) for i in found]
    if len({classify(op)[0] for op in ops}) > 1:
        return None
    first = found[0]
    return first if len(found) == 1 else dataclasses.replace(first, name=e.hlo_op)


def device_breakdown(
    events: Sequence[Event],
    tables: dict[str, dict[str, hlo.Instruction]],
    first_step: int,
    expected: int,
    buffers: dict[str, dict[str, tuple[str, ...]]] | None = None,
) -> dict[str, Any]:
    """Per-step breakdown of one device's events (tables: module -> its HLO instructions; buffers: module ->
    command buffer -> the instructions of its cuBLAS GEMMs)."""
    busy: dict[str, float] = defaultdict(float)
    for e in events:
        busy[e.module] += e.end_ns - e.start_ns
    module = max(busy, key=busy.get) if busy else ""
    groups, how = executions([e for e in events if e.module == module], expected)
    groups = [g for g in groups if g]
    kernels = {m: hlo.by_kernel(table) for m, table in tables.items()}
    cache: dict[tuple[str, str, str], tuple[str, str, bool, str, str]] = {}
    per_line: dict[str, list[tuple[float, float, str, str]]] = defaultdict(list)
    rule_time: dict[str, float] = defaultdict(float)
    census: dict[tuple[str, str], list] = {}  # (op, bucket) -> [kernel, rule, op_name, seconds]
    for e in events:
        key = (e.module, e.hlo_op, e.name)
        if key not in cache:
            op = _op(e, tables.get(e.module, {}), kernels.get(e.module, {}), (buffers or {}).get(e.module, {}))
            cache[key] = (*classify(op), is_container(op), op.op_name, op.hlo_op or op.kernel)
        bucket, rule, container, op_name, instruction = cache[key]
        per_line[e.line].append((e.start_ns, e.end_ns, bucket, "container" if container else KIND[bucket]))
        if container:
            continue
        rule_time[rule] += e.end_ns - e.start_ns
        entry = census.setdefault((instruction, bucket), [e.name, rule, op_name, 0.0])
        entry[3] += e.end_ns - e.start_ns
    spans = [s for line in per_line.values() for s in breakdown.exclusive(line)]
    starts = [min(e.start_ns for e in g) for g in groups]
    steps = []
    for i, group in enumerate(groups):
        last = i + 1 == len(groups)
        end = max(e.end_ns for e in group) if last else starts[i + 1]
        one = breakdown.split(spans, starts[i], end)
        counts: dict[str, int] = defaultdict(int)  # events (kernels, thunks) starting in the window, per bucket
        for e in events:
            if starts[i] <= e.start_ns < end:
                counts[cache[(e.module, e.hlo_op, e.name)][0]] += 1
        one["events"] = dict(counts)
        if how == "whole window":
            one = _divided(one, expected)
        label = first_step + i if how != "whole window" else f"{first_step}..{first_step + expected - 1} (mean)"
        steps.append({"step": label, "ends_at_next_step": not last, **one})
    total = sum(rule_time.values()) or 1.0

    def listed(items) -> list[dict[str, Any]]:
        return [
            {
                "op": op,
                "kernel": kernel[:100],
                "bucket": bucket,
                "rule": rule,
                "op_name": op_name[-100:],
                "share_of_kernel_time": round(t / total, 4),
            }
            for (op, bucket), (kernel, rule, op_name, t) in items
        ]

    ranked = sorted(census.items(), key=lambda kv: -kv[1][3])
    return {
        "module": module,
        "segmentation": how,
        "steps": steps,
        "mean": breakdown.mean(steps),
        "rule_share_of_kernel_time": {r: round(t / total, 4) for r, t in sorted(rule_time.items(), key=_by_time)},
        "largest_ops": listed(ranked[:TOP_OPS]),
        "largest_unclaimed": listed([kv for kv in ranked if kv[1][1] == "unclaimed"][:TOP_UNCLAIMED]),
    }


def _by_time(item: tuple[str, float]) -> float:
    return -item[1]


def _divided(step: dict, n: int) -> dict:
    def per(value):
        return {k: v / n for k, v in value.items()} if isinstance(value, dict) else value / n

    scaled = ("window_s", "buckets_s", "idle_s", "kernel_s", "events")
    return {k: (per(v) if k in scaled else v) for k, v in step.items()}


def analyze(run: Path, first_step: int, expected: int, metric_step_times: dict[int, float]) -> dict[str, Any]:
    """The breakdown of every traced device of every process of a run (what profile.json holds)."""
    traces = find_traces(run)
    if not traces:
        raise ProfileError(
            f"no trace under {run / rundir.PROFILE_DIR / TRACE_DIR} (nor MaxText's tensorboard folder): the run "
            "stopped before its traced steps, or was not run with profile=on"
        )
    started = time.monotonic()
    devices, sources, dumps = [], [], []
    for process, files in sorted(traces.items()):
        events: list[Event] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the reader's stat iterator on Python 3.12
            for f in files:
                events += trace.read(f)
        sources += [str(f) for f in files]
        folder = run / rundir.PROFILE_DIR / HLO_DIR / f"process_{process}"
        tables: dict[str, dict[str, hlo.Instruction]] = {}
        buffers: dict[str, dict[str, tuple[str, ...]]] = {}
        for module, program in {(e.module, e.program_id) for e in events if e.module}:
            found = hlo.find_dump(folder, module, program)
            if found and module not in tables:
                tables[module] = hlo.parse(hlo.read(found))
                dumps.append(str(found))
                thunks = hlo.find_thunks(found)
                if thunks:
                    buffers[module] = hlo.command_buffer_gemms(*(hlo.read(p) for p in thunks))
        by_device: dict[str, list[Event]] = defaultdict(list)
        for e in events:
            by_device[e.device].append(e)
        for device, evs in sorted(by_device.items()):
            one = device_breakdown(evs, tables, first_step, expected, buffers)
            for s in one["steps"]:
                if isinstance(s["step"], int) and s["step"] in metric_step_times:
                    s["maxtext_step_time_s"] = metric_step_times[s["step"]]
            devices.append({"process": process, "device": device, "hlo_dump": bool(tables), **one})
    means = [d["mean"] for d in devices if d["mean"]]
    return {
        "buckets": [{"bucket": b, "label": label, "kind": kind} for b, label, kind in BUCKETS],
        "traced_steps": list(range(first_step, first_step + expected)),
        "devices": devices,
        "mean": breakdown.mean(means),
        "sources": {"traces": sources, "hlo_dumps": dumps},
        "analysis_s": round(time.monotonic() - started, 2),
    }


def metric_step_times(rows: Sequence[dict]) -> dict[int, float]:
    """MaxText's own per-step time (perf/step_time_seconds) by step, to set beside the traced windows."""
    out = {}
    for r in rows:
        if "step" in r and "perf/step_time_seconds" in r:
            out[int(float(r["step"]))] = float(r["perf/step_time_seconds"])
    return out


def maxtext_step_times(
    rows: Sequence[dict],
    first_step: int,
    expected: int,
    counted: Sequence[int] | None = None,
) -> dict[str, Any]:
    """MaxText's step times (host clock) inside and outside the traced window: the profiling overhead's evidence.

    Untraced steps are the steady ones (`counted`: the run summary's, judged by its events; without them the step
    times alone, observe/runs/steady.py) that neither start the trace (the first traced step's time includes starting
    it) nor follow it (the step after the window includes writing the trace).
    """
    times = metric_step_times(rows)
    steps = sorted(times)
    if counted is None:
        judged = steady.judge([steady.Step(s, times[s], 1) for s in steps], {})
        counted = judged.steady([steady.Step(s, times[s], 1) for s in steps])
    kept = set(counted)
    traced = [s for s in steps if first_step < s < first_step + expected]
    untraced = [s for s in steps if s in kept and (s < first_step or s > first_step + expected)]
    return {
        "traced_steps": traced,
        "traced_median_s": statistics.median(times[s] for s in traced) if traced else None,
        "untraced_steps": untraced,
        "untraced_median_s": statistics.median(times[s] for s in untraced) if untraced else None,
    }


def format_breakdown(profile: dict[str, Any]) -> str:
    """The mean step of every device as the end-of-run summary shows it (ms and share of the step)."""
    mean = profile.get("mean") or {}
    if not mean:
        return "step-time breakdown: no traced step"
    window = mean["window_s"] or 1.0
    n = len(profile["devices"])
    lines = [
        f"step-time breakdown (traced steps {profile['traced_steps'][0]}..{profile['traced_steps'][-1]}, mean over "
        f"{n} device(s); {rundir.PROFILE})",
        f"  {'traced step':<44} {mean['window_s'] * 1e3:10.2f} ms",
    ]
    for b, label, _ in BUCKETS:
        v = mean["buckets_s"][b]
        if v > 0:
            lines.append(f"  {label:<44} {v * 1e3:10.2f} ms  {v / window:6.1%}")
    lines.append(f"  {'idle':<44} {mean['idle_s'] * 1e3:10.2f} ms  {mean['idle_s'] / window:6.1%}")
    comm, hidden = mean.get("communication_share_of_kernel_time"), mean.get("collective_hidden_share")
    lines.append(
        f"  communication share of kernel time {_pct(comm)}; collective time hidden under compute {_pct(hidden)}"
    )
    if not all(d["hlo_dump"] for d in profile["devices"]):
        lines.append("  note: no HLO dump for some processes: MaxText's functions and scopes were not used to classify")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def write(
    run: Path,
    first_step: int,
    expected: int,
    provenance: dict,
    counted: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Analyze the run's traces and write profile.json (with the run's provenance); returns what it wrote.
    `counted`: the steady steps of the run's summary."""
    rows = metrics.read(run / rundir.METRICS).rows if (run / rundir.METRICS).is_file() else []
    profile = {
        "provenance": provenance,
        **analyze(run, first_step, expected, metric_step_times(rows)),
        "maxtext_step_time": maxtext_step_times(rows, first_step, expected, counted),
    }
    rundir.write_json(run / rundir.PROFILE, profile)
    return profile


def report_run(
    run: Path,
    first_step: int,
    expected: int,
    provenance: dict,
    counted: Sequence[int] | None = None,
) -> str:
    """What `moekit train ... profile=on` prints at the end: the breakdown, or why there is none."""
    try:
        return format_breakdown(write(run, first_step, expected, provenance, counted))
    except (ProfileError, trace.TraceError, metrics.MetricsError) as exc:
        return f"step-time breakdown: none ({exc})"
