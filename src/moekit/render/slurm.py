"""Render a composed config as a Slurm batch script (pure).

srun starts the tasks and each runs `moekit train ... cluster=slurm`; rendezvous.from_slurm finds the
ranks and the coordinator (first host of the step) in the task's environment. cluster.task_layout picks
one task per JAX process (srun starts processes_per_node tasks per node) or one per node (moekit starts
the node's processes). With cluster.container=pyxis every task runs in cluster.image (pyxis/enroot).

Every option is built as a list from the config and joined here; each value is shell-quoted. The only
unquoted words are the `${SLURM_...}` variables this module writes itself. Names and the time limit are
also checked at validation (config/formats.py), so that Slurm reads each #SBATCH line as one option.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from moekit.config import formats
from moekit.config.schema import Config
from moekit.translate.env import env_vars

# The image's ENTRYPOINT (Dockerfile): pyxis does not run it, so the task names it (it checks the image's
# MaxText against moekit's keys, then execs moekit).
ENTRYPOINT = "/opt/moekit/entrypoints/moekit-entrypoint"
# Shell words that Slurm fills in for each job; never built from config values.
SUBMIT_DIR = '"${SLURM_SUBMIT_DIR}"'
JOB_ID = '"${SLURM_JOB_ID}"'


def tasks_per_node(cfg: Config) -> int:
    """srun tasks per node: one per JAX process (per_process) or one moekit per node (per_node)."""
    return cfg.cluster.processes_per_node if cfg.cluster.task_layout == "per_process" else 1


def sbatch_options(cfg: Config) -> list[str]:
    """The #SBATCH options, one `--key=value` each (values quoted)."""
    c, q = cfg.cluster, shlex.quote
    opts = [
        f"--job-name={q(formats.job_name(cfg))}",
        f"--nodes={c.nodes}",
        f"--ntasks-per-node={tasks_per_node(cfg)}",
    ]
    if cfg.hardware.platform == "gpu":
        opts.append(f"--gpus-per-node={c.gpus_per_node}")
    opts += ["--exclusive", f"--time={q(c.time_limit)}"]
    if c.requeue:
        opts.append("--requeue")
    opts += [
        f"--signal=B:TERM@{c.signal_grace_s}",  # to this shell, which passes it on to every task (below)
        f"--output={q(formats.job_name(cfg) + '-%j.out')}",
        "--open-mode=append",  # a requeued job adds to its log instead of truncating it
    ]
    if c.partition:
        opts.append(f"--partition={q(c.partition)}")
    if c.account:
        opts.append(f"--account={q(c.account)}")
    return opts


def srun_options(cfg: Config) -> list[str]:
    """Options of the one srun: the task layout, the failure rule and (pyxis) the container."""
    c, q = cfg.cluster, shlex.quote
    # --kill-on-bad-exit: one failed task ends the whole step (a JAX job cannot go on without it).
    opts = [f"--ntasks-per-node={tasks_per_node(cfg)}", "--kill-on-bad-exit=1"]
    if c.container == "pyxis":
        extra = "".join("," + m for m in c.container_mounts)
        opts += [
            f"--container-image={q(c.image)}",
            f"--container-mounts={SUBMIT_DIR}{q(':' + c.container_workdir + extra)}",
            f"--container-workdir={q(c.container_workdir)}",
        ]
    return opts


def environment(cfg: Config) -> list[tuple[str, str]]:
    """Variables the script exports for every task: the chosen network option's (moekit sets them again)."""
    return [(v.name, v.value) for v in env_vars(cfg) if v.name in cfg.network.env]


def train_command(cfg: Config, overrides: Sequence[str]) -> list[str]:
    """What each task runs (unquoted words): the same experiment and overrides under cluster=slurm."""
    rest = [o for o in overrides if not o.startswith(("experiment=", "cluster="))]
    program = [ENTRYPOINT, "train"] if cfg.cluster.container == "pyxis" else ["moekit", "train"]
    return [*program, f"experiment={cfg.experiment_name}", "cluster=slurm", *rest]


def run_dir_word(cfg: Config, overrides: Sequence[str]) -> str | None:
    """run.dir=<base>/<experiment>/slurm-<job id>: every task of the job shares it, and a requeued job (same
    id) resumes it. None when the overrides set run.dir themselves, or cluster.output names a volume (the run
    directory is then <volume path>/<name> for every task and every resubmission: Config.run_dir)."""
    if any(o.lstrip("+").startswith("run.dir=") for o in overrides) or cfg.cluster.output_volume is not None:
        return None
    return shlex.quote(f"run.dir={cfg.run.base_dir}/{cfg.experiment_name}/slurm-") + JOB_ID


def script(cfg: Config, overrides: Sequence[str], head: Sequence[str]) -> str:
    """The sbatch script: #SBATCH options, the network's exports, a check that the volumes' paths exist, then srun in
    the background under a trap that passes the time-limit SIGTERM on to every task."""
    q = shlex.quote
    command = " ".join(q(w) for w in train_command(cfg, overrides))
    run_dir = run_dir_word(cfg, overrides)
    srun = " ".join(["srun", *srun_options(cfg), command, *([run_dir] if run_dir else [])])
    lines = ["#!/bin/bash", *head, *(f"#SBATCH {o}" for o in sbatch_options(cfg)), "set -euo pipefail", ""]
    env = environment(cfg)
    if env:
        lines.append(f"# network={cfg.network.name}")
        lines += [f"export {name}={q(value)}" for name, value in env]
        lines.append("")
    if cfg.cluster.volumes:
        lines.append("# cluster.volumes: Slurm mounts nothing; every path must already be there (a shared file system)")
        paths = " ".join(q(v.path) for v in cfg.cluster.volumes)
        lines.append(
            f'for p in {paths}; do [[ -d "$p" ]] || {{ echo "$p is not a directory on $(hostname); '
            'fix cluster.volumes" >&2; exit 1; }; done'
        )
        lines.append("")
    lines += [
        "# Slurm signals this shell (--signal=B:TERM) before the time limit; every task gets it from here.",
        "# (srun itself would answer SIGTERM by killing the step.)",
        "trapped=0",
        "trap 'trapped=1; scancel --signal=TERM \"${SLURM_JOB_ID}\"' TERM",
        srun + " &",
        "step=$!",
        "status=0",
        'wait "${step}" || status=$?',
        "# The trap ends `wait` early: wait again for srun's own status, and exit with it.",
        'while [ "${trapped}" = 1 ]; do trapped=0; status=0; wait "${step}" || status=$?; done',
        'exit "${status}"',
    ]
    return "\n".join(lines) + "\n"
