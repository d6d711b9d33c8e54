"""The fabric phase: inside every process of a job, after the rendezvous and before MaxText builds the model, run
the collectives training uses on the configured mesh, check every result and time them (effects: devices, the
coordination service's key-value store, the run directory).

The worker calls `phase(environ)`; `moekit fabric` runs the same phase with no training after it. The spec comes
from translate/fabric.py (FABRIC_ENV, JSON); fabric_verdict judges what the ranks measured. Ranks meet at each
collective through the coordination service's key-value store (process 0 says go once all have arrived), so a
rank that does not arrive is named, with its host, within fabric.timeout_s; a watchdog thread bounds a
collective that never returns. Process 0 writes fabric.json and prints one summary line.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moekit.base import parse
from moekit.config.kinds.hardware import link_table
from moekit.translate import fabric_verdict as fv

FABRIC_ENV = fv.FABRIC_ENV
# Test-only switch: "<fault>:<rank>" makes one rank misbehave (stop: stops inside the check before a collective;
# hang: arrives, then never takes part; wrong_result: corrupts its result; coordinator: joins a coordinator where
# no job listens). Only the tests set it.
FAULT_ENV = "MOEKIT_FABRIC_FAULT"
FAILED_RC = 3  # exit status of a process the check stopped
_PREFIX = "moekit_fabric"


class FabricFailure(Exception):
    """The check found what stops a run: its problems (fabric_verdict's dicts)."""

    def __init__(self, problems: list[dict[str, Any]]):
        super().__init__(problems[0]["what"] if problems else "fabric check failed")
        self.problems = problems


def _client():
    try:
        from jax._src import distributed
    except ImportError:
        return None
    return distributed.global_state.client


class _Meet:
    """Ranks meeting at each stage through the key-value store: arrive, process 0 says go, or the missing are named."""

    def __init__(self, client, rank: int, n: int, timeout_s: float, nodes: int = 1):
        self.client, self.rank, self.n, self.timeout_s = client, rank, n, timeout_s
        self.hosts: dict[int, str] = {rank: socket.gethostname()}
        self.per_node = max(1, n // max(1, nodes))  # processes per node: ranks are numbered node by node

    def node(self, rank: int) -> int:
        """The node a rank runs on (the launch numbers ranks node by node)."""
        return rank // self.per_node

    def link(self, ranks: Sequence[int]) -> str:
        """The link class between process 0 and `ranks` (for a stage that runs no collective: the exchange)."""
        return fv.SCALE_OUT if any(self.node(r) != self.node(0) for r in ranks) else fv.SCALE_UP

    def _dir(self, prefix: str) -> dict[int, str]:
        try:
            entries = self.client.key_value_dir_get(prefix)
        except Exception:  # noqa: BLE001 (the service is gone: nobody can be named)
            return {}
        return {int(k.rsplit("/", 1)[1]): v for k, v in entries}

    def exchange_hosts(self) -> None:
        """Every rank's host name, published once."""
        if self.client is None:
            return
        self.client.key_value_set(f"{_PREFIX}/host/{self.rank}", self.hosts[self.rank])
        self.stage("start")
        self.hosts |= self._dir(f"{_PREFIX}/host/")

    def host(self, rank: int) -> str:
        """The host of `rank` as it published it; a rank that stopped before publishing it is named by its node:
        this host when it shares this process's node, else the node's number."""
        if rank not in self.hosts and self.client is not None:
            self.hosts |= self._dir(f"{_PREFIX}/host/")  # published after this process last looked
        if rank in self.hosts:
            return self.hosts[rank]
        if self.node(rank) == self.node(self.rank):
            return self.hosts[self.rank]
        return f"node {self.node(rank)} (its host name was never published)"

    def missing(self, stage: str) -> list[tuple[int, str]]:
        """(rank, host) of the ranks that have not arrived at `stage`."""
        here = self._dir(f"{_PREFIX}/arrive/{stage}/")
        return [(r, self.host(r)) for r in range(self.n) if r not in here]

    def stage(self, stage: str, link_class: str | None = None) -> None:
        """Arrive at `stage` and wait for every rank (bounded by the timeout): FabricFailure names the missing."""
        if self.client is None:
            return
        self.client.key_value_set(f"{_PREFIX}/arrive/{stage}/{self.rank}", "1")
        ms = int(self.timeout_s * 1000)
        try:
            if self.rank == 0:
                deadline = time.monotonic() + self.timeout_s
                for r in range(1, self.n):
                    left = max(1, int((deadline - time.monotonic()) * 1000))
                    self.client.blocking_key_value_get(f"{_PREFIX}/arrive/{stage}/{r}", left)
                self.client.key_value_set(f"{_PREFIX}/go/{stage}", "1")
            else:
                self.client.blocking_key_value_get(f"{_PREFIX}/go/{stage}", ms)
        except Exception:  # noqa: BLE001 (a deadline, or the coordinator is gone)
            missing = self.missing(stage)
            link = link_class or self.link([r for r, _ in missing])
            raise FabricFailure([fv.missing_problem(stage, missing, self.timeout_s, link)]) from None

    def publish(self, key: str, value: str) -> None:
        """Put this rank's `key` into the store."""
        if self.client is not None:
            self.client.key_value_set(f"{_PREFIX}/{key}/{self.rank}", value)

    def gather(self, key: str) -> dict[int, str]:
        """Every rank's `key` (process 0 waits for each, bounded by the timeout)."""
        if self.client is None:
            return {}
        deadline = time.monotonic() + self.timeout_s
        out = {}
        for r in range(self.n):
            left = max(1, int((deadline - time.monotonic()) * 1000))
            try:
                out[r] = self.client.blocking_key_value_get(f"{_PREFIX}/{key}/{r}", left)
            except Exception:  # noqa: BLE001
                raise FabricFailure(
                    [fv.missing_problem(f"{key} exchange", [(r, self.host(r))], self.timeout_s, self.link([r]))]
                ) from None
        return out


class _Watchdog:
    """Bounds one collective: a rank stuck inside it (the others too then) is stopped after the timeout with
    the stage named, since the main thread cannot leave a blocked collective."""

    def __init__(self, timeout_s: float, on_timeout: Callable[[str, str | None], None]):
        self.timeout_s, self.on_timeout = timeout_s, on_timeout
        self.current: tuple[str, str | None, float] | None = None
        threading.Thread(target=self._run, daemon=True, name="moekit-fabric-watchdog").start()

    def arm(self, stage: str, link_class: str | None) -> None:
        """Start the bound for `stage`, a collective over links of `link_class`."""
        self.current = (stage, link_class, time.monotonic() + self.timeout_s)

    def disarm(self) -> None:
        """The stage finished."""
        self.current = None

    def _run(self) -> None:
        while True:
            time.sleep(0.2)
            cur = self.current
            if cur is not None and time.monotonic() > cur[2]:
                self.on_timeout(cur[0], cur[1])
                return


def build_mesh(devices: list, ici: dict[str, int], dcn: dict[str, int]):
    """The job's mesh over `devices` (ordered by process): DCN axes outermost, as MaxText's hybrid mesh puts slices
    (groups of consecutive processes) on them; axis names data, fsdp, tensor, expert."""
    from jax.sharding import Mesh

    shape = [dcn[a] for a in fv.AXES] + [ici[a] for a in fv.AXES]
    arr = np.array(devices, dtype=object).reshape(shape)
    k = len(fv.AXES)
    arr = arr.transpose([i for a in range(k) for i in (a, a + k)])
    return Mesh(arr.reshape([dcn[a] * ici[a] for a in fv.AXES]), fv.AXES)


def _shard_map():
    import jax

    if hasattr(jax, "shard_map"):
        return lambda f, mesh, i, o: jax.shard_map(f, mesh=mesh, in_specs=i, out_specs=o, check_vma=False)
    from jax.experimental.shard_map import shard_map

    return lambda f, mesh, i, o: shard_map(f, mesh=mesh, in_specs=i, out_specs=o, check_rep=False)


def _programs(c: fv.Collective, mesh, elems: int):
    """(fill, collective, expected) for one collective: a jitted fill of each device's buffer from its mesh
    position, the jitted collective alone (what is timed), and the expected result per device (numpy)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    smap = _shard_map()
    spec = P(fv.AXES)
    sizes = dict(mesh.shape)
    n = int(np.prod([sizes[a] for a in c.axes]))

    def position(axes):
        pos = 0
        for a in axes:
            pos = pos * sizes[a] + jax.lax.axis_index(a)
        return pos

    if c.name == "all_reduce":

        def fill(x):
            return x + (position(c.axes) + 1).astype(jnp.float32)

        def run(x):
            return jax.lax.psum(x, c.axes)

        def expected(coords):
            return np.full(elems, n * (n + 1) / 2, np.float32)

    elif c.name == "all_to_all":
        (axis,) = c.axes

        def fill(x):
            i = position(c.axes)
            return x + jnp.repeat(i * n + jnp.arange(n), elems // n).astype(jnp.float32)

        def run(x):
            return jax.lax.all_to_all(x, axis, 0, 0, tiled=True)

        def expected(coords):
            i = coords[axis]
            return np.repeat(np.arange(n) * n + i, elems // n).astype(np.float32)

    else:  # all_gather over fsdp: each rank contributes elems // n, all get elems
        (axis,) = c.axes

        def fill(x):
            return x[: elems // n] + (position(c.axes) + 1).astype(jnp.float32)

        def run(x):
            return jax.lax.all_gather(x, axis, tiled=True)

        def expected(coords):
            return np.repeat(np.arange(1, n + 1), elems // n).astype(np.float32)

    sharding = NamedSharding(mesh, spec)
    total = elems * mesh.devices.size
    zeros = jax.jit(lambda: jnp.zeros((total,), jnp.float32), out_shardings=sharding)
    filled = jax.jit(smap(fill, mesh, spec, spec))
    timed = jax.jit(smap(run, mesh, spec, spec))
    return (lambda: filled(zeros())), timed, expected


def _coords(mesh) -> dict[int, dict[str, int]]:
    out = {}
    for idx in np.ndindex(mesh.devices.shape):
        out[mesh.devices[idx].id] = dict(zip(fv.AXES, map(int, idx), strict=True))
    return out


def _groups(c: fv.Collective, mesh, domain_of: Callable[[Any], int]) -> dict[int, tuple[int, str, int]]:
    """device id -> (group index, link class, group size) for collective `c`."""
    coords = _coords(mesh)
    others = [a for a in fv.AXES if a not in c.axes]
    keys: dict[tuple, list] = {}
    for d in mesh.devices.flat:
        keys.setdefault(tuple(coords[d.id][a] for a in others), []).append(d)
    out = {}
    for gi, members in enumerate(keys.values()):
        cls = fv.link_class([domain_of(d) for d in members])
        for d in members:
            out[d.id] = (gi, cls, len(members))
    return out


def _fault(environ: dict[str, str], rank: int) -> str | None:
    kind, _, who = environ.get(FAULT_ENV, "").partition(":")
    return kind if kind and who.isdigit() and int(who) == rank else None


def misdirect(environ: dict[str, str]) -> dict[str, str]:
    """Test-only (FAULT_ENV=coordinator:<rank>): that rank's rendezvous goes to a port where no coordinator listens,
    as a process started with another job's address would; everyone else's environment is returned unchanged."""
    from moekit.base import ports
    from moekit.translate import rendezvous as rz

    rank = environ.get(rz.PROCESS_ID)
    if rank is None or not rank.isdigit() or _fault(environ, int(rank)) != "coordinator":
        return environ
    host = environ[rz.COORDINATOR].rsplit(":", 1)[0]
    return environ | {rz.COORDINATOR: f"{host}:{ports.free_port()}"}


def measure(spec: dict[str, Any], environ: dict[str, str]) -> dict[str, Any]:
    """Run the check on this process's devices; process 0 returns the record (other processes: their part)."""
    import jax

    started = time.monotonic()
    rank, n = jax.process_index(), jax.process_count()
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    mesh_sizes = {a: spec["ici"][a] * spec["dcn"][a] for a in fv.AXES}
    expected = fv.expected_rates(link_table(), spec.get("links"))
    record = _new_record(spec, len(devices), n, mesh_sizes, expected)
    plan = fv.collectives(mesh_sizes)
    if len(devices) == 1 or not plan:
        record["checked"] = f"{len(devices)} device(s): no collective to check"
        record["wall_s"] = time.monotonic() - started
        return record
    if int(np.prod(list(mesh_sizes.values()))) != len(devices):
        record["checked"] = f"the mesh {mesh_sizes} does not cover the {len(devices)} devices: nothing checked"
        record["wall_s"] = time.monotonic() - started
        return record
    meet = _Meet(_client() if n > 1 else None, rank, n, spec["timeout_s"], spec["nodes"])

    def timed_out(stage: str, link_class: str | None) -> None:
        # Who never entered the collective is the cause; when all did, none finished it (a link or a device).
        absent = meet.missing(stage + "/enter")
        verb, who = ("enter", absent) if absent else ("finish", meet.missing(stage + "/done"))
        _fail([fv.missing_problem(stage, who, spec["timeout_s"], link_class, verb)], record, spec, rank)

    # Process 0 records the problem (fabric.json): the others' bound ends later, so that a rank whose own bound
    # fired first does not end the group before process 0 wrote it.
    watchdog = _Watchdog(spec["timeout_s"] + (5 if rank == 0 else 10), timed_out)
    if _fault(environ, rank) == "stop_early":  # test fault: stopped before it published its host name
        print(f"moekit: fabric: test fault: rank {rank} stops before the check starts", flush=True)
        time.sleep(10**6)
    meet.exchange_hosts()
    mesh = build_mesh(devices, spec["ici"], spec["dcn"])
    per_node = max(1, len(devices) // spec["nodes"])
    domain = spec.get("nvlink_domain") or per_node
    position = {d.id: i for i, d in enumerate(devices)}

    def domain_of(d) -> int:
        return position[d.id] // domain

    fault = _fault(environ, rank)
    mine: list[dict[str, Any]] = []
    try:
        _run_plan(plan, spec, mesh, domain_of, meet, watchdog, fault, rank, mine)
    except FabricFailure as exc:
        record["partial"] = mine  # what this process measured before the check stopped
        _fail(exc.problems, record, spec, rank)
    meet.publish("result", json.dumps(mine))
    everyone = (
        {r: parse.json_text(v, f"rank {r}'s fabric result") for r, v in meet.gather("result").items()}
        if n > 1
        else {0: mine}
    )
    if rank == 0:
        _judge_all(plan, mine, everyone, meet, spec, record)
    record["checked"] = ", ".join(f"{c.name} over {'+'.join(c.axes)}" for c in plan)
    record["hosts"] = {str(r): meet.host(r) for r in range(n)}
    record["wall_s"] = time.monotonic() - started
    return record


def _new_record(
    spec: dict[str, Any], devices: int, processes: int, mesh_sizes: dict[str, int], expected: dict[str, Any]
) -> dict[str, Any]:
    """The record's header (what was asked, on which devices and mesh, against which rates), with no result yet."""
    return {
        "mode": spec["mode"],
        "min_fraction": spec["min_fraction"],
        "hardware": spec["hardware"],
        "devices": devices,
        "processes": processes,
        "mesh": mesh_sizes,
        "sizes_bytes": spec["sizes"],
        "expected": expected,
        "link_names": fv.link_names(spec["platform"]),
        "results": [],
        "problems": [],
    }


def _judge_all(
    plan: list[fv.Collective],
    mine: list[dict[str, Any]],
    everyone: dict[int, list[dict[str, Any]]],
    meet: _Meet,
    spec: dict[str, Any],
    record: dict[str, Any],
) -> None:
    """On process 0: judge every collective at every size over all ranks' measurements, into `record`.

    The sizes are the ones process 0 measured; the largest one is the size whose rate is held to the bound.
    """
    for c in plan:
        sizes = sorted({m["size"] for m in mine if m["collective"] == c.name})
        for size in sizes:
            ranks = [
                fv.RankResult(r, meet.host(r), m["group"], m["link_class"], m["group_size"], m["time_s"], m["correct"])
                for r, ms in everyone.items()
                for m in ms
                if m["collective"] == c.name and m["size"] == size
            ]
            result = fv.judge(c, size, ranks, record["expected"], spec["min_fraction"], size == sizes[-1])
            record["problems"] += result.pop("problems")
            record["results"].append(result)


def _run_plan(
    plan: list[fv.Collective],
    spec: dict[str, Any],
    mesh: Any,
    domain_of: Callable[[Any], int],
    meet: _Meet,
    watchdog: _Watchdog,
    fault: str | None,
    rank: int,
    mine: list[dict[str, Any]],
) -> None:
    """Run every collective at every size: meet, run once (checked), time, append this process's shards to mine."""
    for ci, c in enumerate(plan):
        groups = _groups(c, mesh, domain_of)
        for size in spec["sizes"]:
            group_size = next(iter(groups.values()))[2]
            elems = max(group_size, (size // 4) // group_size * group_size)
            stage = f"{c.name}/{fv.size_text(elems * 4).replace(' ', '')}"
            fill, run, want = _programs(c, mesh, elems)
            x = fill()
            compiled = run.lower(x).compile()
            if fault == "stop" and ci == len(plan) - 1:
                print(f"moekit: fabric: test fault: rank {rank} stops inside the check", flush=True)
                time.sleep(10**6)
            cls = next(iter(groups.values()))[1]
            meet.stage(stage, cls)
            watchdog.arm(stage, cls)
            if fault == "hang" and ci == len(plan) - 1:  # arrived, but never enters the collective
                print(f"moekit: fabric: test fault: rank {rank} hangs in the collective", flush=True)
                time.sleep(10**6)
            meet.publish(f"arrive/{stage}/enter", "1")
            try:
                out = compiled(x)
                out.block_until_ready()  # the first run, checked
                times = []
                for _ in range(spec["iterations"]):
                    t0 = time.perf_counter()
                    compiled(x).block_until_ready()
                    times.append(time.perf_counter() - t0)
            except Exception as exc:
                # A peer that never entered and then left breaks the communicator (gloo: "Connection closed by
                # peer"); name that peer rather than the error it caused here.
                absent = meet.missing(stage + "/enter")
                if absent:
                    raise FabricFailure([fv.missing_problem(stage, absent, spec["timeout_s"], cls, "enter")]) from exc
                raise
            meet.publish(f"arrive/{stage}/done", "1")
            watchdog.disarm()
            coords = _coords(mesh)
            for shard in out.addressable_shards:
                got = np.asarray(shard.data)
                if fault == "wrong_result":
                    got = got.copy()
                    got[0] += 1
                gi, lc, gs = groups[shard.device.id]
                mine.append(
                    {
                        "collective": c.name,
                        "size": elems * 4,
                        "group": gi,
                        "link_class": lc,
                        "group_size": gs,
                        "time_s": statistics.median(times),
                        "correct": bool(np.array_equal(got, want(coords[shard.device.id]))),
                    }
                )
            del x, out


def _write(record: dict[str, Any], spec: dict[str, Any]) -> None:
    path = spec.get("file")
    if path:
        try:
            Path(path).write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
        except OSError as exc:
            print(f"{fv.WARNING} could not write {path}: {exc}", flush=True)


def _fail(problems: list[dict[str, Any]], record: dict[str, Any], spec: dict[str, Any], rank: int) -> None:
    """Name the problem, record it (process 0) and end this process: the run does not train."""
    for p in problems:
        print(f"{fv.FAILURE} {p['what']} [link class {p.get('link_class') or '?'}]", flush=True)
    if rank == 0:
        record["problems"] = [*record.get("problems", []), *problems]
        record["stopped"] = True
        _write(record, spec)
    sys.stdout.flush()
    os._exit(FAILED_RC)


def phase(environ: dict[str, str]) -> bool:
    """The fabric phase of one process (nothing when FABRIC_ENV is unset or fabric.mode=off): check, record,
    print, and in enforce mode stop every process on a problem; a rank that does not arrive stops the run in
    every mode (the others could only hang). Returns whether training follows (not with fabric.only)."""
    raw = environ.get(FABRIC_ENV)
    if not raw:
        return True
    spec = parse.json_text(raw, FABRIC_ENV, finite=False)
    if spec["mode"] == "off":
        return True
    import jax

    rank = jax.process_index()
    try:
        record = measure(spec, environ)
    except FabricFailure as exc:
        _fail(exc.problems, {"mode": spec["mode"], "results": []}, spec, rank)
    except Exception as exc:  # noqa: BLE001 (a device or communicator error: exit now, the others are told by
        # the launcher; leaving through Python would wait in jax.distributed's shutdown barrier for them)
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        problem = {
            "kind": "error",
            "rank": rank,
            "host": socket.gethostname(),
            "link_class": None,
            "what": f"rank {rank} (host {socket.gethostname()}) could not run the check: {type(exc).__name__}: {first}",
        }
        _fail([problem], {"mode": spec["mode"], "results": []}, spec, rank)
    problems = record.get("problems", [])
    if rank == 0:
        _write(record, spec)
        print(f"{fv.SUMMARY} {fv.summary_line(record)}", flush=True)
        for p in problems:
            print(f"{fv.WARNING} {p['what']} [link class {p.get('link_class')}]", flush=True)
    verdict = _verdict(rank, jax.process_count(), problems, spec)
    if verdict and spec["mode"] == "enforce":
        print(f"{fv.FAILURE} {verdict} (fabric.mode=enforce refuses to train; fabric.json)", flush=True)
        sys.stdout.flush()
        os._exit(FAILED_RC)
    return not spec.get("only")


def _verdict(rank: int, n: int, problems: list[dict[str, Any]], spec: dict[str, Any]) -> str:
    """Process 0's verdict, shared with every process so that all stop together (empty: none)."""
    text = problems[0]["what"] if problems else ""
    client = _client() if n > 1 else None
    if client is None:
        return text
    if rank == 0:
        client.key_value_set(f"{_PREFIX}/verdict", text or "-")
        return text
    got = client.blocking_key_value_get(f"{_PREFIX}/verdict", int(spec["timeout_s"] * 1000))
    return "" if got == "-" else got
