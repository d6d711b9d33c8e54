"""Which config keys reach the training step (pure): the one list of keys that do not, each with why.

Two runs are the same *training configuration* when every key that reaches the training step is equal: the keys
of NOT_TRAINING only place, watch, check or trace a run, and a difference in them is no difference between two
trainings. Every comparison reads this list: the report's and verify's speed column and tune's ranking
(observe/reports/comparable.py), and the loss-gap tool's twins (observe/reports/loss_gap.py). docs/metrics.md,
"Comparing runs", states the rule and lists these keys.

A key is matched with every key under it: `run` covers `run.dir`; `cluster.max_restarts` only itself. A key not
listed counts (a new option is a difference until it is listed here with its reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NOT_TRAINING: dict[str, str] = {
    "experiment_name": "a name: the experiment's settings themselves are compared",
    "run": "where the run is kept and how it is watched: its name, directory, the secrets' names, the stall bound",
    "expect": "reference numbers a report sets beside the run's afterwards",
    "fabric": "the collective check before training: it ends before MaxText starts",
    "profile": "tracing: the steps whose windows hold a trace edge are left out of the steady windows "
    "(observe/runs/steady.py), and the traced steps train as any other",
    "hardware.peak_tflops": "the published peak: MFU's denominator, never read by the step",
    "hardware.peak_source": "the citation of the peak",
    "hardware.hbm_source": "the citation of the memory size",
    "hardware.host_source": "the citation of the host memory",
    "cluster.coordinator_port": "where the processes meet: the rendezvous, before the first step",
    "cluster.rendezvous_timeout_s": "how long the processes wait to meet, before the first step",
    "cluster.max_restarts": "the launcher's restart policy after a failure",
    "cluster.requeue": "the launcher's restart policy after a preemption (Slurm)",
    "cluster.signal_grace_s": "the launcher's grace between its signal and the kill",
    "cluster.time_limit": "the scheduler's limit on the job",
    "cluster.name": "the job's name",
    "cluster.namespace": "where the job is placed (Kubernetes)",
    "cluster.queue": "where the job is queued",
    "cluster.partition": "where the job is queued (Slurm)",
    "cluster.account": "who the job is billed to (Slurm)",
    "cluster.output": "where the scheduler writes the job's log (Slurm)",
    "cluster.service_account": "the job's identity (Kubernetes)",
    "cluster.tolerations": "which nodes may take the job (Kubernetes)",
    "cluster.node_selector": "which nodes may take the job (Kubernetes)",
    "cluster.secrets": "secrets' names for the job's environment (tokens), never read by the step",
}


def ignored(key: str) -> str | None:
    """Why the dotted config key `key` does not reach the training step, or None when it does."""
    for listed, why in NOT_TRAINING.items():
        if key == listed or key.startswith(listed + "."):
            return why
    return None


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config sections as dotted keys (an empty section stays one key)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping) and v:
            out |= flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """The dotted keys of a resolved config (config.yaml's mapping, or Config.model_dump()) that reach the training
    step, with their values."""
    return {k: v for k, v in flatten(config).items() if ignored(k) is None}


def differences(a: Mapping[str, Any], b: Mapping[str, Any], also: tuple[str, ...] = ()) -> list[str]:
    """'key: A vs B' for each key that reaches the training step and differs between configs `a` and `b`, in key
    order; empty when they are the same training configuration. `also`: further keys (and the keys under them)
    that may differ here (the loss-gap tool's precision)."""
    fa, fb = keys(a), keys(b)
    out = []
    for key in sorted(set(fa) | set(fb)):
        if any(key == x or key.startswith(x + ".") for x in also):
            continue
        if fa.get(key) != fb.get(key):
            out.append(f"{key}: {fa.get(key)!r} vs {fb.get(key)!r}")
    return out
