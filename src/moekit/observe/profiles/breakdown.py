"""Where one device's step time goes, from its traced operations (pure: events and buckets in, seconds out).

Each traced operation has a bucket (profile_rules.py) and a kind: compute, collective or transfer. A step's
window is split exactly: at every instant the device runs compute, the time goes to the compute buckets running
then (shared equally); when it only communicates or copies, to those buckets (exposed communication); when nothing
runs, to idle. So the buckets plus idle add up to the window. Kernel time sums each operation's own duration
instead (overlap counted twice), which is what "the communication share of kernel time" is measured in. Collective
time that runs while compute runs is "hidden".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from moekit.observe.profiles.profile_rules import BUCKETS, KIND

NS = 1e-9


@dataclass(frozen=True, slots=True)
class Span:
    """An operation's own time on one line (stream or thread): its interval minus what ran nested inside it."""

    start: float
    end: float
    bucket: str
    kind: str
    """compute, collective, transfer, or container (control flow: counts only when nothing else runs)."""


def exclusive(intervals: Iterable[tuple[float, float, str, str]]) -> list[Span]:
    """Spans of one line's events with nested events cut out of their parents (a CPU while thunk encloses its
    body's thunks). An event that overlaps its parent's end is cut at that end."""
    out: list[Span] = []
    stack: list[list] = []  # [start of the parent's current piece, end, bucket, kind]

    def close_until(t: float) -> None:
        while stack and stack[-1][1] <= t:
            piece, end, bucket, kind = stack.pop()
            if end > piece:
                out.append(Span(piece, end, bucket, kind))
            if stack:
                stack[-1][0] = max(stack[-1][0], end)

    for start, end, bucket, kind in sorted(intervals, key=lambda i: (i[0], -i[1])):
        close_until(start)
        if stack:
            parent = stack[-1]
            if start > parent[0]:
                out.append(Span(parent[0], start, parent[2], parent[3]))
            parent[0] = start
            end = min(end, parent[1])
        stack.append([start, end, bucket, kind])
    close_until(float("inf"))
    return out


def split(spans: Sequence[Span], start: float, end: float) -> dict:
    """Seconds per bucket, idle, kernel time and overlap of `spans` clipped to the window [start, end) (ns)."""
    points: list[tuple[float, int, Span]] = []
    kernel: dict[str, float] = defaultdict(float)
    for s in spans:
        a, b = max(s.start, start), min(s.end, end)
        if b <= a:
            continue
        points += [(a, 1, s), (b, -1, s)]
        if s.kind != "container":
            kernel[s.bucket] += b - a
    points.sort(key=lambda p: (p[0], p[1]))
    wall: dict[str, float] = defaultdict(float)
    kinds = ("compute", "collective", "transfer", "container")
    active: dict[str, dict[str, int]] = {k: defaultdict(int) for k in kinds}
    idle = hidden = hidden_transfer = 0.0
    last = start
    for t, step, s in points:
        dt = t - last
        if dt > 0:
            compute = active["compute"]
            n_compute = sum(compute.values())
            if n_compute:
                for bucket, n in compute.items():
                    wall[bucket] += dt * n / n_compute
                hidden += dt * sum(active["collective"].values())
                hidden_transfer += dt * sum(active["transfer"].values())
            else:
                moving = {**active["collective"], **active["transfer"]}
                n_moving = sum(moving.values())
                if n_moving:
                    for bucket, n in moving.items():
                        wall[bucket] += dt * n / n_moving
                elif sum(active["container"].values()):
                    wall["other"] += dt
                else:
                    idle += dt
            last = t
        counts = active[s.kind]
        counts[s.bucket] += step
        if counts[s.bucket] == 0:
            del counts[s.bucket]
    idle += max(0.0, end - last)
    total_kernel = sum(kernel.values())
    collective = sum(v for b, v in kernel.items() if KIND[b] == "collective")
    transfer = sum(v for b, v in kernel.items() if KIND[b] == "transfer")
    return {
        "window_s": (end - start) * NS,
        "buckets_s": {b: wall.get(b, 0.0) * NS for b, _, _ in BUCKETS},
        "idle_s": idle * NS,
        "kernel_s": {b: kernel.get(b, 0.0) * NS for b, _, _ in BUCKETS},
        "communication_share_of_kernel_time": collective / total_kernel if total_kernel else None,
        "collective_hidden_share": hidden / collective if collective else None,
        "offload_hidden_share": hidden_transfer / transfer if transfer else None,
    }


def mean(steps: Sequence[dict]) -> dict:
    """The average step of several split() results (shares recomputed from the summed times)."""
    n = len(steps)
    if not n:
        return {}
    buckets = {b: sum(s["buckets_s"][b] for s in steps) / n for b, _, _ in BUCKETS}
    kernel = {b: sum(s["kernel_s"][b] for s in steps) / n for b, _, _ in BUCKETS}

    def share(key: str, kind: str) -> float | None:
        weights = [(s[key], sum(v for b, v in s["kernel_s"].items() if KIND[b] == kind)) for s in steps]
        total = sum(w for _, w in weights)
        return sum(v * w for v, w in weights if v is not None) / total if total else None

    total_kernel = sum(kernel.values())
    collective = sum(v for b, v in kernel.items() if KIND[b] == "collective")
    return {
        "window_s": sum(s["window_s"] for s in steps) / n,
        "buckets_s": buckets,
        "idle_s": sum(s["idle_s"] for s in steps) / n,
        "kernel_s": kernel,
        "communication_share_of_kernel_time": collective / total_kernel if total_kernel else None,
        "collective_hidden_share": share("collective_hidden_share", "collective"),
        "offload_hidden_share": share("offload_hidden_share", "transfer"),
    }
