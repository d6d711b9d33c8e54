"""Everything one training job needs, translated from a config (pure)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from moekit import rundir
from moekit.config.schema import Config
from moekit.translate import fabric, profile
from moekit.translate.env import EnvVar, env_vars
from moekit.translate.maxtext_args import TRAIN_MODULE, Arg, maxtext_args
from moekit.translate.xla_flags import xla_flags

WORKER_MODULE = "moekit.worker"


@dataclass(frozen=True, slots=True)
class Job:
    """One training job translated: MaxText's arguments, XLA's flags and the environment, each with its origin."""

    args: list[Arg]
    xla_flags: list[str]
    env: list[EnvVar]

    @property
    def maxtext_args(self) -> list[str]:
        """The `key=value` arguments MaxText's trainer gets, in order."""
        return [a.render() for a in self.args]

    @property
    def env_dict(self) -> dict[str, str]:
        """The shared environment of every process as a mapping (rendezvous variables are per process)."""
        return {v.name: v.value for v in self.env}

    def argv(self, process_id: int = 0, python: str = sys.executable) -> list[str]:
        """What a process executes: moekit's worker joins the rendezvous, then runs MaxText's trainer.

        Every MaxText process writes metrics_file, so processes other than 0 get their own file.
        """
        args = [
            a.render()
            if a.key != "metrics_file" or process_id == 0
            else f"{a.key}={per_process(str(a.value), process_id)}"
            for a in self.args
        ]
        return [python, "-m", WORKER_MODULE, TRAIN_MODULE, *args]

    def maxtext_command(self, python: str = "python3") -> list[str]:
        """The equivalent plain MaxText command line (what the worker runs after the rendezvous)."""
        return [python, "-m", TRAIN_MODULE, *self.maxtext_args]


def per_process(path: str, process_id: int) -> str:
    """metrics.jsonl -> metrics.3.jsonl for process 3 (process 0 keeps the plain name)."""
    if process_id == 0:
        return path
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.{process_id}.{ext}" if dot else f"{path}.{process_id}"


def build(cfg: Config, run_dir: str, metrics_file: str) -> Job:
    """The job of `cfg` writing into `run_dir` (MaxText's base_output_directory) and `metrics_file`."""
    env = env_vars(cfg) + profile.env_vars(cfg, f"{run_dir}/{rundir.PROFILE_DIR}") + fabric.env_vars(cfg, run_dir)
    return Job(maxtext_args(cfg, run_dir, metrics_file), xla_flags(cfg), env)
