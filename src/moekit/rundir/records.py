"""The run directory's records, written and read here only: manifest.json, summary.json, job.json (and the
config.yaml and versions.json written beside them before launch).

Each record is a typed object; its file name comes from moekit.rundir. Readers elsewhere (resume, the
checkpoint fallback, trials, reports) take these objects and never index the JSON by string key themselves.
Keys an older or newer moekit wrote that this one does not know are kept (`extra`) and written back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import bounded, parse
from moekit.base.errors import MoekitError

RUNNING, OK, FAILED, PREEMPTED = "running", "ok", "failed", "preempted"
MAX_BYTES = 64 * bounded.MiB  # any record (config, manifest, summary, profile, ...) is far smaller


class Unreadable(MoekitError):
    """A record exists but cannot be read (cut short, not JSON, not a mapping)."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{bounded.shown(path)} is unreadable ({why})")
        self.path, self.why = path, why


def _mapping(path: Path, read: Callable[..., Any], finite: bool = False) -> dict[str, Any] | None:
    """The mapping in `path` (read with parse.json_file or parse.yaml_file; `finite`: an inf or nan is refused,
    for records whose numbers are measurements used as such); None when the file is absent; Unreadable when it is
    damaged, or is not a regular file (a pipe, a device)."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        data = read(path, MAX_BYTES, "run record", finite=finite)
    except bounded.TooLarge as exc:
        raise Unreadable(path, str(exc).split("\n")[0]) from None
    except parse.ParseError as exc:
        raise Unreadable(path, str(exc).split(": ", 1)[-1]) from None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(path, exc.strerror or str(exc)) from None
    if not isinstance(data, dict):
        raise Unreadable(path, "not a mapping")
    return data


@dataclass
class Manifest:
    """manifest.json: the run's status, its attempts and, once it ended, how."""

    status: str
    experiment: str | None = None
    started: str | None = None
    overrides: list[str] = field(default_factory=list)
    attempt: int | None = None
    resumed_from_checkpoint: int | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Every earlier attempt's outcome, and after the run ends this one's too (the last entry)."""
    ended: str | None = None
    returncodes: list[int | None] | None = None
    failed_rank: int | None = None
    failure: dict[str, Any] | None = None
    """failures.Failure.to_dict() of the failure, with `set_aside` when its checkpoint was moved away."""
    preemption: dict[str, Any] | None = None
    """run/preemption.py's stop record (signal, last step, checkpoint, steps lost, signal to exit) when preempted."""
    incomplete: list[str] | None = None
    """What could not be recorded or logged (a full disk)."""
    wall_s: float | None = None
    """The run's wall time: every attempt's, launch to end, summed (each attempt's entry keeps its own); the same
    value as summary.json's."""
    wall_s_lower_bound: bool = False
    """Whether wall_s is a lower bound: an attempt was killed (its time runs from its first event to its last) or
    recorded none."""
    host_load: dict[str, Any] | None = None
    """run/host_load.py's record of how busy the host was over the run (over_attempts: unknown when a killed
    attempt left none), and with what besides the run; each attempt's entry keeps its own."""
    extra: dict[str, Any] = field(default_factory=dict)

    _BASE = ("experiment", "started", "overrides", "attempt", "resumed_from_checkpoint", "attempts")
    _OUTCOME = ("status", "ended", "returncodes", "failed_rank", "failure", "wall_s", "wall_s_lower_bound", "host_load")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, keys in the order moekit has always written them."""
        base = {k: getattr(self, k) for k in self._BASE}
        if self.status == RUNNING and self.ended is None:
            out = {"status": self.status, **base}
        else:
            out = base | {k: getattr(self, k) for k in self._OUTCOME}
            if self.preemption:
                out["preemption"] = self.preemption
            if self.incomplete:
                out["incomplete"] = self.incomplete
        return out | self.extra

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Manifest:
        """A manifest read back; Unreadable is the caller's to raise when `status` is missing (see read_manifest)."""
        known = {*cls._BASE, *cls._OUTCOME, "preemption", "incomplete"}
        kwargs = {k: data[k] for k in known if k in data}
        kwargs.setdefault("status", "")
        kwargs["overrides"] = list(kwargs.get("overrides") or [])
        kwargs["attempts"] = list(kwargs.get("attempts") or [])
        return cls(**kwargs, extra={k: v for k, v in data.items() if k not in known})

    def history(self) -> list[dict[str, Any]]:
        """Attempt entries as observe.runs.summary.attempt_starts wants them: the list, or this manifest alone."""
        return self.attempts or [self.to_dict()]


def read_manifest(run: Path) -> Manifest | None:
    """The manifest of records folder `run`; None when there is none; Unreadable when it is damaged."""
    path = run / rundir.MANIFEST
    data = _mapping(path, parse.json_file)
    if data is None:
        return None
    if not isinstance(data.get("status"), str):
        raise Unreadable(path, "no status: not a moekit manifest")
    for key, kind in (("overrides", str), ("attempts", dict)):  # what a foreign or damaged manifest gets wrong
        value = data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, kind) for v in value):
            raise Unreadable(
                path, f"{key} is {type(value).__name__}, not a list of {kind.__name__}: not a moekit manifest"
            )
    return Manifest.from_dict(data)


def try_manifest(run: Path) -> Manifest | None:
    """read_manifest, with a damaged manifest read as none (a trial's after-the-fact look)."""
    try:
        return read_manifest(run)
    except Unreadable:
        return None


def write_manifest(run: Path, manifest: Manifest, *, full_disk_ok: bool = True) -> None:
    """Write the manifest; on a full disk it is rewritten in place (rundir.write_record) unless told otherwise."""
    if full_disk_ok:
        rundir.write_record(run / rundir.MANIFEST, manifest.to_dict())
    else:
        rundir.write_json(run / rundir.MANIFEST, manifest.to_dict())


@dataclass
class Summary:
    """summary.json: what the run measured (observe.runs.summary's statistics) and where that number comes from."""

    experiment: str | None = None
    run_dir: str | None = None
    hardware: str | None = None
    devices: int | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    peak_tflops: dict[str, Any] = field(default_factory=dict)
    peak_source: str | None = None
    wall_s: float | None = None
    """The run's wall time: every attempt's, summed (an attempt that recorded none adds nothing); the manifest's."""
    wall_s_lower_bound: bool = False
    """Whether wall_s is a lower bound (a killed attempt counts from its first event to its last)."""
    wall_s_attempts: list[float | None] = field(default_factory=list)
    """Each attempt's wall time, first to last; None for an attempt that recorded none (killed)."""
    stats: dict[str, Any] = field(default_factory=dict)
    """observe.runs.summary.summarize() of the metrics: steps, step_time_s, tflops_per_device, mfu, losses, ..."""

    _FIELDS = (
        "experiment",
        "run_dir",
        "hardware",
        "devices",
        "provenance",
        "peak_tflops",
        "peak_source",
        "wall_s",
        "wall_s_lower_bound",
        "wall_s_attempts",
    )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the provenance fields, then the statistics."""
        return {k: getattr(self, k) for k in self._FIELDS} | self.stats

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Summary:
        """A summary read back: known fields by name, everything else is the statistics."""
        fields = {k: data[k] for k in cls._FIELDS if k in data}
        return cls(**fields, stats={k: v for k, v in data.items() if k not in cls._FIELDS})

    @property
    def steady(self) -> bool:
        """Whether the run has steady-state numbers (enough steady steps: observe/runs/steady.py)."""
        return bool(self.stats.get("step_time_s"))


def write_summary(run: Path, summary: Summary) -> None:
    """Write summary.json of records folder `run`."""
    rundir.write_json(run / rundir.SUMMARY, summary.to_dict())


def read_summary(run: Path) -> Summary | None:
    """summary.json of `run`; None when absent or damaged (a run killed before it summarized)."""
    try:
        data = _mapping(run / rundir.SUMMARY, parse.json_file)
    except Unreadable:
        return None
    return None if data is None else Summary.from_dict(data)


@dataclass
class JobRecord:
    """job.json: what was launched, redacted: MaxText command and args, XLA flags, env, per-process env."""

    maxtext_command: str
    maxtext_args: list[str]
    xla_flags: list[str]
    env: dict[str, str]
    processes: list[dict[str, str]]
    inherited_env: dict[str, Any]
    """Variables this moekit inherited that change how a run behaves (RECORDED_ENV_PREFIXES), redacted."""
    overrides: list[str]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, keys in field order."""
        return dict(self.__dict__)


def read_job(run: Path) -> JobRecord | None:
    """job.json of `run`; None when absent; Unreadable when damaged."""
    data = _mapping(run / rundir.JOB, parse.json_file)
    return None if data is None else JobRecord(**data)


def read_config(run: Path) -> dict[str, Any] | None:
    """The resolved config the run used (config.yaml, redacted); None when absent; Unreadable when damaged."""
    return _mapping(run / rundir.CONFIG, parse.yaml_file)


def read_versions(run: Path) -> dict[str, Any]:
    """versions.json of `run` (python, jax, maxtext, moekit, host); empty when absent."""
    return _mapping(run / rundir.VERSIONS, parse.json_file) or {}


def write_before_launch(
    run: Path,
    config_view: dict[str, Any],
    job: JobRecord,
    versions: dict[str, Any],
    manifest: Manifest,
    scrub: Callable[[str], str],
) -> None:
    """config.yaml, job.json (scrubbed of secret values), versions.json and the running manifest, in that order."""
    rundir.write_yaml(run / rundir.CONFIG, config_view)
    rundir.write_atomic(run / rundir.JOB, scrub(json.dumps(job.to_dict(), indent=2)) + "\n")
    rundir.write_json(run / rundir.VERSIONS, versions)
    write_manifest(run, manifest, full_disk_ok=False)


def read_fabric(run: Path) -> dict[str, Any] | None:
    """fabric.json, what the fabric check measured before training (worker/fabric.py writes it); None without one."""
    return _mapping(run / "fabric.json", parse.json_file, finite=True)


def read_profile(run: Path) -> dict[str, Any] | None:
    """profile.json, the step-time breakdown of a run trained with profile=on; None without one."""
    return _mapping(run / rundir.PROFILE, parse.json_file, finite=True)
