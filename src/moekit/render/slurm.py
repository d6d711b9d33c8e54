"""Render a composed config as a Slurm batch script (pure): one `srun` task per node runs `moekit train`.

rendezvous.from_slurm finds the node rank (SLURM_NODEID) and the coordinator (first host of
SLURM_JOB_NODELIST); moekit then starts cluster.processes_per_node processes in each task.
The #SBATCH values are checked at validation (config/formats.py: names, time limit), since an option line
cannot be quoted; the command line is shell-quoted.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from moekit.config import formats
from moekit.config.schema import Config


def train_command(cfg: Config, overrides: Sequence[str]) -> list[str]:
    rest = [o for o in overrides if not o.startswith(("experiment=", "cluster="))]
    return ["moekit", "train", f"experiment={cfg.experiment_name}", "cluster=slurm", *rest]


def script(cfg: Config, overrides: Sequence[str], head: Sequence[str]) -> str:
    c, name = cfg.cluster, formats.job_name(cfg)
    sbatch = [
        f"--job-name={name}",
        f"--nodes={c.nodes}",
        "--ntasks-per-node=1",  # one moekit per node; it starts the per-GPU processes itself
        "--exclusive",
        f"--time={c.time_limit}",
        f"--output={name}-%j.out",
    ]
    if cfg.hardware.platform == "gpu":
        sbatch.insert(3, f"--gpus-per-node={c.gpus_per_node}")
    if c.partition:
        sbatch.append(f"--partition={c.partition}")
    if c.account:
        sbatch.append(f"--account={c.account}")
    lines = ["#!/bin/bash", *head, *(f"#SBATCH {s}" for s in sbatch), "set -euo pipefail", ""]
    lines.append("# --kill-on-bad-exit: one failed node ends the whole step (a JAX job cannot go on without it)")
    lines.append("srun --ntasks-per-node=1 --kill-on-bad-exit=1 " + shlex.join(train_command(cfg, overrides)))
    return "\n".join(lines) + "\n"
