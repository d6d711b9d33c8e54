"""The job as it may be shown or recorded: secrets redacted, each piece with the config choice that set it.

One view serves `moekit train --dry-run` (text or JSON) and the run directory's job.json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from moekit.base import redact
from moekit.config.schema import Config
from moekit.preflight import host as preflight
from moekit.translate import job as jobmod
from moekit.translate.env import EnvVar
from moekit.translate.maxtext_args import Arg
from moekit.translate.xla_flags import flag_origins


def secret_names(cfg: Config) -> list[str]:
    """Names the config marks secret: run.secrets and the variables a JobSet takes from Kubernetes Secrets."""
    return [*cfg.run.secrets, *(s.env for s in cfg.cluster.secrets)]


@dataclass(frozen=True)
class Shown:
    """What of a run may be shown or recorded: the names the config marks secret, a scrubber of every secret value,
    and the config and the typed overrides with those values redacted."""

    names: list[str]
    scrub: redact.Scrubber
    config: dict[str, Any]
    overrides: list[str]


def shown(cfg: Config, environ: Mapping[str, str], overrides: Sequence[str] = ()) -> Shown:
    """The run's secrets found once (run.secrets, the cluster's secret variables, credential-looking names and
    values of `environ`) and what may be shown of its config and overrides."""
    names = secret_names(cfg)
    scrub = redact.Scrubber(redact.secret_values(dict(environ), cfg.to_dict(), names))
    typed = [scrub(o) for o in redact.redact_assignments(list(overrides), names)]
    return Shown(names, scrub, redact.redact_tree(cfg.to_dict(), names), typed)


def redacted_job(job: jobmod.Job, names: list[str]) -> jobmod.Job:
    """The job as it may be shown or recorded: values of secret arguments and variables replaced."""
    args = [
        Arg(a.key, redact.REDACTED, a.origin) if redact.redact_assignments([a.render()], names) != [a.render()] else a
        for a in job.args
    ]
    env = [
        EnvVar(v.name, redact.REDACTED, v.origin) if redact.is_secret_name(v.name, names) and v.value else v
        for v in job.env
    ]
    return jobmod.Job(args, job.xla_flags, env)


def describe(cfg: Config, job: jobmod.Job, procs: list[dict[str, str]]) -> dict[str, Any]:
    """The dry-run view: what would run, and which config choice set each piece."""
    return {
        "experiment": cfg.experiment_name,
        "config": cfg.to_dict(),
        "maxtext_args": job.maxtext_args,
        "maxtext_arg_origins": {a.key: a.origin for a in job.args},
        "maxtext_command": job.maxtext_command(),
        "xla_flags": job.xla_flags,
        "xla_flag_origins": flag_origins(cfg),
        "env": job.env_dict,
        "env_origins": {v.name: v.origin for v in job.env},
        "processes": procs,
        "hardware": cfg.hardware.model_dump(mode="json"),
        "devices": cfg.num_devices,
        "mesh": {"ici": cfg.ici_filled, "dcn": dict(cfg.parallelism.dcn.items()), "num_slices": cfg.num_slices},
    }


def format_text(view: dict[str, Any], job: jobmod.Job, checked: preflight.Report) -> str:
    """The dry-run view for a terminal: config, MaxText command, XLA flags and env with their origins, probes."""
    width = max(len(a) for a in view["maxtext_args"])
    out = ["# resolved config", yaml.safe_dump(view["config"], sort_keys=False).rstrip(), ""]
    if (view["config"].get("fabric") or {}).get("only"):  # the fabric check alone: MaxText never starts
        out.append("# fabric check only (fabric.only=true): the processes join the rendezvous, check and time the")
        out.append("# collectives of the mesh below, write fabric.json and stop; no MaxText command runs")
        out.append(f"#   mesh: ici {view['mesh']['ici']}, dcn {view['mesh']['dcn']}")
    else:
        out.append("# MaxText command (each argument with the config choice that set it)")
        out.append(f"python3 -m {jobmod.TRAIN_MODULE} \\")
        out += [f"    {a.render():<{width}}  # {a.origin}" for a in job.args]
    out += ["", "# XLA_FLAGS"] + ([f"  {f}  # {o}" for f, o in view["xla_flag_origins"].items()] or ["  (none)"])
    out += ["", "# environment"] + [f"  {v.name}={v.value}  # {v.origin}" for v in job.env if v.name != "XLA_FLAGS"]
    out += ["", f"# processes on this host ({len(view['processes'])}; rendezvous env)"]
    out += [f"  [{i}] {json.dumps(p, sort_keys=True)}" for i, p in enumerate(view["processes"])]
    where = "this host is the target" if checked.target else "this host is not the target, so nothing here is fatal"
    out += ["", f"# preflight ({where}: {checked.why})", checked.text() or "  every host probe passed"]
    out += [f"  {note}" for note in checked.notes]
    return "\n".join(out)
