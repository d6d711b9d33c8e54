"""The render targets (`moekit render target=<name>`): one row each, the cluster kind it runs under, how its file
is rendered and how it is checked."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

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
    max_bytes: int = 0
    """The largest file the cluster takes (0: no limit): `moekit render` refuses a larger one."""
    limit: str = ""
    """Whose limit max_bytes is, for the message."""


def _jobset_text(cfg: Config, overrides: Sequence[str], head: list[str]) -> str:
    return document.yaml_text(jobset.jobset(cfg, overrides), head)


def _jobset_check(text: str, cfg: Config, crd: str | None, kubernetes: str | None) -> list[str]:
    version = max(kubernetes or val.KUBERNETES_VERSION, cfg.network.min_kubernetes, key=_version_key)
    schema = val.crd_schema(Path(crd)) if crd else val.packaged_schema()
    where = f"the CRD in {crd}" if crd else f"moekit's copy of the {val.schema_source(schema)} (--crd: yours)"
    print(f"moekit: checking against {where}, Kubernetes {version}", file=sys.stderr)
    return val.problems(yaml.safe_load(text), Path(crd) if crd else None, version)


def _version_key(v: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in v.split("."))
    except ValueError:
        raise MoekitError(f"--kubernetes {v}: give a version such as 1.30") from None


def _compose_text(cfg: Config, overrides: Sequence[str], head: list[str]) -> str:
    return document.yaml_text(compose.project(cfg, overrides), head)


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
        max_bytes=1_572_864,
        limit="the Kubernetes API server's object limit (etcd's default request size)",
    ),
    # slurmctld's default max_script_size (SchedulerParameters): sbatch refuses a larger script.
    "slurm": Target(
        "slurm", "Slurm batch script", _slurm_text, max_bytes=4 * 1024 * 1024, limit="Slurm's default max_script_size"
    ),
    # One service per JobSet pod, on one Docker host: its containers share the host's GPUs and NVLink.
    "compose": Target("jobset", "Compose project", _compose_text, pod_network=False),
}
