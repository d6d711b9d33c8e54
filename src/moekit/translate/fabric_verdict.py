"""The fabric check's pure part: what to measure on a mesh, which link class each group uses, what rate it should
reach (data/links.yaml, the rates `moekit plan` assumes) and the verdict on what the ranks measured.

moekit.worker.fabric runs the collectives inside the job's processes and hands the per-rank numbers here. Bus bandwidth
follows nccl-tests' convention, so the numbers compare with the per-GPU, one-direction link rates of links.yaml:
all-reduce moves 2(n-1)/n of the buffer per rank, all-gather and all-to-all (n-1)/n.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FABRIC_ENV = "MOEKIT_FABRIC"  # the check's spec (JSON) the worker reads, set by translate/fabric.py
RECORD = "fabric.json"  # what process 0 writes into the run directory
AXES = ("data", "fsdp", "tensor", "expert")
SCALE_UP, SCALE_OUT = "scale_up", "scale_out"
WRONG, SLOW, MISSING = "wrong_result", "slow_link", "not_arrived"
# The failure line the worker prints when the check stops a run; failures.py reads it back from the log.
FAILURE = "moekit: fabric failure:"
WARNING = "moekit: fabric warning:"
SUMMARY = "moekit: fabric:"


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective the check runs: its name, the mesh axes its groups span, and its bus-bandwidth factor."""

    name: str
    axes: tuple[str, ...]
    """Mesh axes the collective runs over; each group is the devices that differ only along them."""

    def bus_factor(self, n: int) -> float:
        """Bytes over the busiest link per byte of buffer (nccl-tests' busbw factor) for a group of n."""
        if n <= 1:
            return 0.0
        return 2 * (n - 1) / n if self.name == "all_reduce" else (n - 1) / n


def collectives(mesh: Mapping[str, int]) -> list[Collective]:
    """What training uses on this mesh: gradient all-reduce over all devices, the EP all-to-all over each
    expert-parallel group, the FSDP all-gather over each FSDP group; an axis of size 1 has nothing to check."""
    out = []
    if math.prod(mesh.values()) > 1:
        out.append(Collective("all_reduce", tuple(a for a in AXES if mesh.get(a, 1) > 1)))
    if mesh.get("expert", 1) > 1:
        out.append(Collective("all_to_all", ("expert",)))
    if mesh.get("fsdp", 1) > 1:
        out.append(Collective("all_gather", ("fsdp",)))
    return out


def link_class(domains: Sequence[int]) -> str:
    """scale_up when every device of a group sits in one NVLink domain (one node on CPU), else scale_out."""
    return SCALE_UP if len(set(domains)) <= 1 else SCALE_OUT


def link_names(platform: str) -> dict[str, str]:
    """How each link class reads to a user of this platform."""
    if platform == "gpu":
        return {SCALE_UP: "within an NVLink domain", SCALE_OUT: "across NVLink domains (network)"}
    return {SCALE_UP: "within a node", SCALE_OUT: "across nodes"}


def expected_rates(classes: Mapping[str, Any], links: Mapping[str, str] | None) -> dict[str, dict[str, Any]]:
    """Per link class the rate `moekit plan` assumes (GB/s per GPU, one direction; `classes`: link class -> its
    entry in links.yaml, config.kinds.hardware.link_table) for the hardware row's `links` and its source; empty without
    links (CPU: nothing to compare with)."""
    if not links:
        return {}
    out = {}
    for cls in (SCALE_UP, SCALE_OUT):
        link = classes[links[cls]]
        out[cls] = {"gb_per_s": link["gb_per_s"], "link": links[cls], "source": link["source"]}
    return out


@dataclass(frozen=True, slots=True)
class RankResult:
    """What one rank measured for one collective at one size."""

    rank: int
    host: str
    group: int
    """Index of the rank's group of this collective (ranks of one group ran it together)."""
    link_class: str
    group_size: int
    time_s: float
    correct: bool


def bus_gb_per_s(c: Collective, size_bytes: int, n: int, time_s: float) -> float | None:
    """Bus bandwidth in GB/s of one run of `c` on a buffer of `size_bytes` in a group of n."""
    if time_s <= 0 or n <= 1:
        return None
    return size_bytes * c.bus_factor(n) / time_s / 1e9


def judge(
    c: Collective,
    size_bytes: int,
    ranks: Sequence[RankResult],
    expected: Mapping[str, Mapping[str, Any]],
    min_fraction: float,
    judge_rate: bool,
) -> dict[str, Any]:
    """One collective at one size: the slowest group's time and bandwidth, the expected rate of its link class,
    their ratio, every rank's numbers and the problems found. `judge_rate`: the size is the largest of the check,
    the only one large enough for a link's rate (smaller ones measure latency)."""
    groups: dict[int, list[RankResult]] = {}
    for r in ranks:
        groups.setdefault(r.group, []).append(r)
    problems = _wrong_results(c, size_bytes, ranks)
    worst, slow = _slowest(c, size_bytes, groups, expected, min_fraction, judge_rate)
    w = worst or {}
    return {
        "collective": c.name,
        "axes": list(c.axes),
        "size_bytes": size_bytes,
        "groups": len(groups),
        "group_size": ranks[0].group_size if ranks else 0,
        "link_class": w.get("link_class"),
        "time_s": w.get("time_s"),
        "gb_per_s": w.get("gb_per_s"),
        "expected_gb_per_s": w.get("expected_gb_per_s"),
        "ratio": w.get("ratio"),
        "slowest_rank": w.get("rank"),
        "per_rank": [
            {
                "rank": r.rank,
                "host": r.host,
                "group": r.group,
                "link_class": r.link_class,
                "time_s": r.time_s,
                "gb_per_s": bus_gb_per_s(c, size_bytes, r.group_size, r.time_s),
                "correct": r.correct,
            }
            for r in sorted(ranks, key=lambda r: r.rank)
        ],
        "problems": problems + slow,
    }


def _wrong_results(c: Collective, size_bytes: int, ranks: Sequence[RankResult]) -> list[dict[str, Any]]:
    """One problem per rank whose result was wrong."""
    return [
        {
            "kind": WRONG,
            "rank": r.rank,
            "host": r.host,
            "link_class": r.link_class,
            "collective": c.name,
            "size_bytes": size_bytes,
            "what": f"{c.name} of {size_text(size_bytes)} gave a wrong result on rank {r.rank} (host {r.host})",
        }
        for r in ranks
        if not r.correct
    ]


def _slowest(
    c: Collective,
    size_bytes: int,
    groups: Mapping[int, list[RankResult]],
    expected: Mapping[str, Mapping[str, Any]],
    min_fraction: float,
    judge_rate: bool,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The slowest rank over all groups (a group runs at its slowest member's pace) with its bandwidth and expected
    rate, and one problem per group under min_fraction of its link's rate (only when `judge_rate`)."""
    worst: dict[str, Any] | None = None
    problems: list[dict[str, Any]] = []
    for members in groups.values():
        slowest = max(members, key=lambda r: r.time_s)
        bw = bus_gb_per_s(c, size_bytes, slowest.group_size, slowest.time_s)
        rate = expected.get(slowest.link_class, {}).get("gb_per_s")
        ratio = bw / rate if bw is not None and rate else None
        entry = {
            "rank": slowest.rank,
            "host": slowest.host,
            "link_class": slowest.link_class,
            "time_s": slowest.time_s,
            "gb_per_s": bw,
            "expected_gb_per_s": rate,
            "ratio": ratio,
        }
        if worst is None or (entry["time_s"] > worst["time_s"]):
            worst = entry
        if judge_rate and ratio is not None and ratio < min_fraction:
            problems.append(
                {
                    "kind": SLOW,
                    "rank": slowest.rank,
                    "host": slowest.host,
                    "link_class": slowest.link_class,
                    "collective": c.name,
                    "size_bytes": size_bytes,
                    "what": f"{c.name} of {size_text(size_bytes)} ran at {bw:.3g} GB/s, {ratio:.0%} of the "
                    f"{rate:g} GB/s expected {slowest.link_class} (under fabric.min_fraction={min_fraction:g}); "
                    f"group of rank {slowest.rank}: ranks {sorted(m.rank for m in members)}",
                }
            )
    return worst, problems


def missing_problem(
    stage: str, missing: Sequence[tuple[int, str]], timeout_s: float, link_class: str | None, verb: str = "arrive at"
) -> dict[str, Any]:
    """The problem of ranks that did not reach (verb "arrive at") or get through ("finish") a stage of the check
    within fabric.timeout_s."""
    ranks = ", ".join(f"rank {r} (host {h})" for r, h in missing) or "a rank"
    first = missing[0] if missing else (None, None)
    return {
        "kind": MISSING,
        "rank": first[0],
        "host": first[1],
        "link_class": link_class,
        "collective": stage,
        "size_bytes": None,
        "what": f"{ranks} did not {verb} {stage} within fabric.timeout_s={timeout_s:g}",
    }


def size_text(n: int) -> str:
    """Bytes as the check names sizes: 64 KiB, 4 MiB, 1 GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def summary_line(record: Mapping[str, Any]) -> str:
    """One console line: what was checked, the largest size's bandwidth per collective against its expected rate,
    and the verdict."""
    results = record.get("results", [])
    if not results:
        return f"{record.get('checked', 'nothing to check')}"
    top = max(r["size_bytes"] for r in results)
    parts = []
    for r in results:
        if r["size_bytes"] != top:
            continue
        bw = f"{r['gb_per_s']:.3g} GB/s" if r.get("gb_per_s") is not None else "n/a"
        exp = f" ({r['ratio']:.0%} of {r['expected_gb_per_s']:g})" if r.get("ratio") is not None else ""
        parts.append(f"{r['collective']} {bw}{exp}")
    problems = record.get("problems", [])
    verdict = "ok" if not problems else f"{len(problems)} problem(s): {problems[0]['what']}"
    return f"{record['devices']} devices, {size_text(top)}: {', '.join(parts)}; {verdict} ({record['wall_s']:.2g} s)"
