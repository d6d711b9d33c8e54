"""Host probes: what this machine must offer before a job's processes start (effects: files, sockets, devices,
subprocesses).

`moekit train` runs every probe of PROBES before it launches anything and stops on any problem. `--dry-run`
runs the same table and reports what it found; a problem is fatal there too, unless this host is not where
the job runs (a JobSet or Slurm job outside its pods or allocation, a GPU job on a host without GPUs): then
it is reported as what this host would refuse, and the target checks again before its own launch.
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base import ports
from moekit.base.errors import MoekitError
from moekit.config.checks import Problem
from moekit.config.schema import Config
from moekit.preflight import checkpoint as checkpoint_preflight
from moekit.preflight import data as data_preflight
from moekit.preflight import maxtext_validate, xla_flags
from moekit.rundir import attempts
from moekit.translate import job as jobmod
from moekit.translate import rendezvous as rz
from moekit.translate.xla_flags import flag_entries

# Where the MaxText validator is told the run writes; it checks paths as strings only, so one placeholder keeps
# the cached answer valid for every run directory.
VALIDATE_DIR = "/moekit-validate/run"


class PreflightError(MoekitError):
    """This host cannot run the job as configured; nothing was launched."""


@dataclass(frozen=True, slots=True)
class Host:
    """What the probes may look at: the environment, the resolved config view and /dev (a folder in tests)."""

    environ: Mapping[str, str]
    config_view: Mapping[str, Any] = field(default_factory=dict)
    """The resolved config as config.yaml records it (to compare with a run directory being resumed)."""
    dev: Path = Path("/dev")


@dataclass(frozen=True, slots=True)
class Probe:
    """One host probe: its name, what it checks, and whether it is costly."""

    name: str
    check: Callable[[Config, Host], Iterator[Problem | str]]
    """Yields the problems it finds, and notes (str) of what it saw when all is well."""
    costly: bool = False
    """Takes seconds (a subprocess); on the target it runs only when the other probes found nothing."""


# ---- the probes ----


def _nearest_existing(path: Path) -> Path:
    for p in [path, *path.parents]:
        if p.exists():
            return p
    return Path("/")


def _broken_link(path: Path) -> Path | None:
    """The first of `path` and its parents that is a symbolic link leading nowhere (dangling or a loop)."""
    for p in reversed([path, *path.parents]):
        try:
            if p.is_symlink() and not p.exists():
                return p
        except OSError:  # a loop: ELOOP
            return p
    return None


def run_dir_usable(cfg: Config, host: Host) -> Iterator[Problem]:
    """The run directory can be created and written, and a run.dir being reused is resumable and free."""
    configured = cfg.run_dir
    key = "run.dir" if cfg.run.dir else "cluster.output" if configured else "run.base_dir"
    path = rundir.absolute(configured or Path(cfg.run.base_dir) / cfg.experiment_name, Path.cwd())
    fix = (
        f"point {key} at a folder you can write (e.g. run.dir=outputs/{cfg.experiment_name}-1), or leave run.dir unset"
    )
    if link := _broken_link(path):
        target = rundir.absolute(os.readlink(link), link.parent)
        try:
            target.resolve(strict=True)
            loop = False
        except FileNotFoundError:
            loop = False
        except (OSError, RuntimeError):  # ELOOP (RuntimeError before Python 3.13)
            loop = True
        what = "a loop of links (it leads back to itself)" if loop else f"a link to {target}, which does not exist"
        repair = f"remove the link (rm {link})" if loop else f"create its target (mkdir -p {target})"
        yield Problem(key, f"{link} is {what}", f"{repair}, or {fix}")
        return
    if path.exists() and not path.is_dir():
        yield Problem(key, f"{path} is a file, not a directory", fix)
        return
    where = _nearest_existing(path)
    if not where.is_dir():
        yield Problem(key, f"{where} is a file, so {path} cannot be created below it", fix)
        return
    try:  # the honest test of "can I create a folder here" (root may pass os.access on /proc or a read-only mount)
        os.rmdir(tempfile.mkdtemp(prefix=".moekit-probe-", dir=where))
    except OSError as exc:
        yield Problem(key, f"cannot create {path}: {exc.strerror} in {where}", fix)
        return
    try:
        free = os.statvfs(where).f_bavail
    except OSError:
        free = 1
    if free == 0:
        yield Problem(key, f"the file system of {where} has no free space left", f"free space there, or {fix}")
        return
    if configured:
        try:  # the launchers of one job share run.dir; each owns its records (launchers/<first process>/)
            first = int(rz.processes(cfg, dict(host.environ))[0].get(rz.PROCESS_ID, 0))
        except rz.RendezvousError:
            first = 0  # rendezvous_env reports it
        records = rundir.for_launcher(path, first)
        try:
            attempts.check_reusable(records, host.config_view)
        except attempts.RunDirError as exc:
            yield Problem(key, str(exc), "")
            return
        lock = records / attempts.LOCK
        if lock.is_file():  # a dry-run must not create the lock; an existing one tells whether a run holds it
            fd = os.open(lock, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield Problem(
                    key,
                    f"{records} is in use by another `moekit train` right now",
                    "wait for it to end, or choose another run.dir",
                )
            finally:
                os.close(fd)


def rendezvous_env(cfg: Config, host: Host) -> Iterator[Problem]:
    """The environment describes this host's part of the job (JobSet pod, Slurm task)."""
    try:
        rz.processes(cfg, dict(host.environ))
    except rz.RendezvousError as exc:
        yield Problem(f"cluster={cfg.cluster.kind}", str(exc), "")


def coordinator_port_free(cfg: Config, host: Host) -> Iterator[Problem]:
    """Two local multi-process jobs on one coordinator port would join each other's rendezvous (gRPC shares the
    port), and fail much later in confusing ways: refuse a port the user set that is already taken (without one,
    each run picks a free port at launch)."""
    port = cfg.cluster.coordinator_port
    if not cfg.cluster.row.one_host or cfg.num_processes == 1 or port is None or ports.port_free(port):
        return
    yield Problem(
        "cluster.coordinator_port",
        f"port {port} is in use on this host (another multi-process job?)",
        f"cluster.coordinator_port={ports.free_port()} (a free port), leave it unset (each run picks a free one), "
        "or wait for the other job to end",
    )


def gpus_present(cfg: Config, host: Host) -> Iterator[Problem]:
    """A GPU config on a host without (enough) GPUs would start, import everything and fail minutes later."""
    if cfg.hardware.platform != "gpu":
        return
    found = len([p for p in host.dev.glob("nvidia*") if p.name.removeprefix("nvidia").isdigit()])
    want = cfg.cluster.gpus_per_node
    if found == 0:
        yield Problem(
            f"hardware={cfg.hardware.name}",
            f"needs NVIDIA GPUs, but this host has none ({host.dev}/nvidia0 is missing)",
            f"hardware=cpu{'' if cfg.backend.runs_on('cpu') else ' moe=ragged_dot'} to train on CPU, or run on a "
            "GPU node (in a container: docker run --gpus all ...)",
        )
    elif found < want:
        yield Problem(
            "cluster.gpus_per_node",
            f"cluster.gpus_per_node={want}, but this host has {found} GPU(s)",
            f"cluster.gpus_per_node={found} (and a mesh that fits), or run on a node with {want} GPUs",
        )


def packages_present(cfg: Config, host: Host) -> Iterator[Problem]:
    """A back end's packages missing fail inside MaxText's model init, after compilation has started (a back end
    with a package of its own probes its needs in its hook_ready instead)."""
    b = cfg.backend
    missing = [p for p in b.packages if importlib.util.find_spec(p) is None]
    if b.hook or not missing:
        return
    yield Problem(f"moe={b.name}", f"{', '.join(missing)} is not importable here (moe={b.name} needs it)", b.install)


def hook_ready(cfg: Config, host: Host) -> Iterator[Problem]:
    """A back end with a package of its own (its row's hook: moe=te_gmm) probes the host its own way."""
    b = cfg.backend
    if not b.hook:
        return
    for found in importlib.import_module(b.hook_module("preflight")).problems(cfg):
        what, _, fix = found.partition(". Fix: ")
        yield Problem(f"moe={b.name}", what, fix)


def data_ready(cfg: Config, host: Host) -> Iterator[Problem | str]:
    """data=hf|grain: the files are where this host can see them, the tokenizer loads and fits the model (and,
    when they do, a note of what was found)."""
    if cfg.data.dataset_type in ("hf", "grain"):
        found, seen = data_preflight.problems(cfg)
        yield from found
        if not found:
            yield data_preflight.found_text(cfg, seen)


def init_from_ready(cfg: Config, host: Host) -> Iterator[Problem | str]:
    """checkpoint.init_from: the folder is here, holds 0/items, and (by the import's record) the configured model's
    family and parameter shapes (and a note of what was found)."""
    found, notes = checkpoint_preflight.problems(cfg)
    yield from found
    yield from notes


def xla_flags_known(cfg: Config, host: Host) -> Iterator[Problem]:
    """Every flag of the job's XLA_FLAGS is one the installed XLA registers, with a value it can read."""
    fields = {}
    for f in flag_entries(cfg):
        fields[f.render()] = f"xla.flags.{f.name}" if f.origin.startswith("xla=") else "cluster.gpus_per_node"
    job_env = dict(jobmod.build(cfg, VALIDATE_DIR, f"{VALIDATE_DIR}/m.jsonl").env_dict)
    if "XLA_FLAGS" not in job_env and host.environ.get("XLA_FLAGS"):  # inherited by the processes
        fields |= {f: "XLA_FLAGS (environment)" for f in host.environ["XLA_FLAGS"].split()}
    if not fields:
        return
    try:
        version, found = xla_flags.verdicts(list(fields), host.environ)
    except xla_flags.Unanswered as exc:
        yield Problem(
            "xla.flags",
            f"cannot check the XLA flags on this host: {exc}",
            "run where the job's jaxlib is installed (moekit train checks them there before it launches)",
        )
        return
    for flag, verdict in found.items():
        name = xla_flags.flag_name(flag)
        if verdict == xla_flags.UNKNOWN:
            yield Problem(
                fields[flag],
                f"XLA (jaxlib {version}) has no flag {name} and would abort at start-up",
                f"correct the spelling or remove {fields[flag]} (the flags are XLA's DebugOptions)",
            )
        elif verdict == xla_flags.BAD_VALUE:
            yield Problem(
                fields[flag],
                f"XLA (jaxlib {version}) cannot read the value in {flag}",
                f"give {name} a value of its type (true/false, a number, or a word)",
            )


def maxtext_accepts(cfg: Config, host: Host) -> Iterator[Problem]:
    """MaxText's own validator accepts the translated arguments (cached per config hash: maxtext_validate)."""
    job = jobmod.build(cfg, VALIDATE_DIR, f"{VALIDATE_DIR}/metrics.jsonl")
    try:
        maxtext_validate.validate(job.maxtext_args, cfg.num_devices, cfg.num_slices, environ=host.environ)
    except maxtext_validate.ValidatorUnavailable as exc:
        yield Problem("maxtext", f"cannot run MaxText's validator here: {exc}", "install MaxText here (make venv)")
    except maxtext_validate.MaxTextRejected as exc:
        yield from _maxtext_problems(exc, {a.key: a.origin for a in job.args})


def _field_of(key: str, origins: Mapping[str, str]) -> str:
    """The config field a MaxText key comes from, as a user would write it."""
    origin = origins.get(key)
    if origin is None:
        return f"maxtext.extra.{key}"
    if origin in ("maxtext.extra", "model.extra"):
        return f"{origin}.{key}"
    return f"MaxText {key} (set by {origin})"


def _maxtext_problems(exc: maxtext_validate.MaxTextRejected, origins: Mapping[str, str]) -> Iterator[Problem]:
    for key, close in exc.unknown.items():
        mean = f"did you mean {close[0]}? " if close else ""
        yield Problem(
            _field_of(key, origins),
            f"MaxText has no key {key!r}",
            f"{mean}correct the spelling or remove {_field_of(key, origins)}",
        )
    if exc.unknown:
        return
    for p in exc.problems:
        named = [_field_of(k, origins) for k in p["keys"]] or ["maxtext"]
        unset = [f"maxtext.extra.{k}=VALUE" for k in p["keys"] if k not in origins]
        fix = f"set {' '.join(unset)}, or change the other keys named" if unset else "change the keys named"
        yield Problem(", ".join(named), p["msg"], fix)
    if not exc.problems:
        first = exc.error.strip().splitlines()[0][:600]
        yield Problem(
            "maxtext", first, "change the key MaxText names (moekit train --dry-run shows which choice set it)"
        )


# Order: what a user most likely has to fix first. Costly probes last.
PROBES: tuple[Probe, ...] = (
    Probe("run directory", run_dir_usable),
    Probe("rendezvous environment", rendezvous_env),
    Probe("coordinator port", coordinator_port_free),
    Probe("GPUs", gpus_present),
    Probe("back-end packages", packages_present),
    Probe("back-end hook", hook_ready),
    Probe("checkpoint.init_from", init_from_ready),
    Probe("data", data_ready, costly=True),
    Probe("XLA flags", xla_flags_known, costly=True),
    Probe("MaxText validator", maxtext_accepts, costly=True),
)


# ---- running the table ----


def is_target(cfg: Config, host: Host) -> tuple[bool, str]:
    """Whether this host is where the job's processes would run, and why (the cluster kind's row says how to tell:
    config/kinds/clusters.py)."""
    c, row = cfg.cluster, cfg.cluster.row
    if not row.one_host:
        if host.environ.get(row.job_env):
            return True, f"this host is in {row.runs_in} ({row.job_env} is set)"
        return False, f"cluster={c.kind} runs in {row.runs_in}, and this host is outside ({row.job_env} is not set)"
    if cfg.hardware.platform == "gpu" and not (host.dev / "nvidia0").exists():
        return False, f"hardware={cfg.hardware.name} runs on GPUs, and this host has none"
    return True, f"cluster={c.kind} runs on this host"


@dataclass
class Report:
    """What the probes found on this host, and whether this host is the job's target (and why)."""

    target: bool
    why: str
    found: list[tuple[str, Problem]] = field(default_factory=list)
    """(probe name, problem)."""
    skipped: list[str] = field(default_factory=list)
    """Costly probes not run because others had already found a problem."""
    notes: list[str] = field(default_factory=list)
    """What probes found worth saying when all is well (e.g. the data files and tokenizer seen)."""

    def to_dict(self) -> dict[str, Any]:
        """The report as `train --dry-run --format json` shows it."""
        return {
            "target": self.target,
            "why": self.why,
            "problems": [{"probe": n, "key": p.key, "what": p.what, "fix": p.fix} for n, p in self.found],
            "skipped": self.skipped,
            "notes": self.notes,
        }

    def text(self) -> str:
        """One line per problem, prefixed by its probe, plus the costly probes not run; empty when none."""
        body = "\n".join(f"  - [{n}] {p}" for n, p in self.found)
        if self.skipped:
            body += f"\n  (not run until these are fixed: {', '.join(self.skipped)})"
        return body


def run(cfg: Config, host: Host, dry_run: bool = False) -> Report:
    """Every probe's findings. Where problems are fatal (a real run, or a dry-run on the target), costly probes
    wait until the cheap ones pass; a dry-run elsewhere runs them all, to report everything."""
    target, why = is_target(cfg, host)
    report = Report(target, why)
    fatal = target or not dry_run
    for probe in PROBES:
        if probe.costly and fatal and report.found:
            report.skipped.append(probe.name)
            continue
        for item in probe.check(cfg, host):
            if isinstance(item, str):
                report.notes.append(item)
            else:
                report.found.append((probe.name, item))
    return report


def ensure(cfg: Config, host: Host, dry_run: bool = False) -> Report:
    """Run the probes; raise PreflightError listing every problem where they are fatal (a real run, or a dry-run
    on the target host), else return the report."""
    report = run(cfg, host, dry_run)
    if report.found and (report.target or not dry_run):
        raise PreflightError(f"{len(report.found)} problem(s) on this host; nothing was launched:\n{report.text()}")
    return report
