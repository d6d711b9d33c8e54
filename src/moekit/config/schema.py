"""The typed schema of a composed moekit config.

Hydra composes YAML from conf/; these models type every field (unknown keys and wrong types are
errors that list the valid choices) and carry one docstring per field with its unit and scope.
The sections live in config/sections/, one module per group (the run's own, the model, the hardware, the
cluster); `Config` composes them here, and every section is importable from here. Derived values (device
counts, filled mesh axes, slice count) are properties of `Config`, computed here and never typed by hand.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

from moekit.config.kinds.backends import BACKENDS, Backend
from moekit.config.sections.base import Scalar, Section
from moekit.config.sections.cluster import Axes, Cluster, Fabric, Network, Parallelism, SecretEnv, Toleration, Volume
from moekit.config.sections.hardware import GPU_FACTS, Features, Hardware, HardwareLinks, Peaks
from moekit.config.sections.model import DecoderBlock, Memory, Model, Moe, Precision, Routing, Xla
from moekit.config.sections.training import Checkpoint, Data, Expect, MaxText, Profile, Provenance, Run, Train

__all__ = [
    "Axes",
    "Checkpoint",
    "Cluster",
    "Data",
    "DecoderBlock",
    "Expect",
    "Fabric",
    "Features",
    "GPU_FACTS",
    "Hardware",
    "HardwareLinks",
    "MaxText",
    "Memory",
    "Model",
    "Moe",
    "Network",
    "Parallelism",
    "Peaks",
    "Precision",
    "Profile",
    "Provenance",
    "Routing",
    "Run",
    "Scalar",
    "SecretEnv",
    "Section",
    "Toleration",
    "Train",
    "Volume",
    "Xla",
    "Config",
    "defaults",
]


class Config(Section):
    """A composed, typed moekit configuration."""

    experiment_name: str = "default"
    """Names run directories and cluster jobs; each experiment file sets its own."""
    run: Run = Run()
    train: Train = Train()
    parallelism: Parallelism = Parallelism()
    checkpoint: Checkpoint = Checkpoint()
    maxtext: MaxText = MaxText()
    expect: Expect | None = None
    fabric: Fabric = Fabric()
    model: Model
    moe: Moe
    precision: Precision
    memory: Memory
    xla: Xla
    hardware: Hardware
    cluster: Cluster
    network: Network
    data: Data
    profile: Profile

    # ---- derived values (never typed by hand) ----
    @property
    def num_processes(self) -> int:
        """JAX processes in the job: nodes x processes per node."""
        return self.cluster.nodes * self.cluster.processes_per_node

    @property
    def devices_per_process(self) -> int:
        """Devices each process drives: the node's devices split over its processes, at least 1."""
        return max(1, self.cluster.gpus_per_node // self.cluster.processes_per_node)

    @property
    def num_devices(self) -> int:
        """Devices in the job: processes x devices per process."""
        return self.num_processes * self.devices_per_process

    @property
    def num_slices(self) -> int:
        """Slices of the mesh: the product of the DCN axes."""
        return math.prod(v for _, v in self.parallelism.dcn.items())

    @property
    def ici_filled(self) -> dict[str, int]:
        """ICI axes with a -1 replaced by what fills one slice (unchanged if it does not divide)."""
        axes = dict(self.parallelism.ici.items())
        per_slice = self.num_devices // max(1, self.num_slices)
        known = math.prod(v for v in axes.values() if v != -1)
        for name, value in axes.items():
            if value == -1:
                axes[name] = per_slice // known if known and per_slice % known == 0 else -1
        return axes

    @property
    def global_batch(self) -> float:
        """Sequences per step across all devices."""
        return self.train.per_device_batch_size * self.num_devices

    @property
    def backend(self) -> Backend:
        """The MoE back end's row (config/kinds/backends.py): what moe=<backend> runs and needs."""
        return BACKENDS[self.moe.backend]

    @property
    def expert_parallel_size(self) -> int:
        """Ranks the experts are spread over: the ICI expert axis (filled) times the DCN one."""
        return self.ici_filled["expert"] * self.parallelism.dcn.expert

    @property
    def ring_of_experts(self) -> bool:
        """moe.dispatch=ring, or the raw MaxText key (maxtext.extra wins over the translated value)."""
        return bool(self.maxtext.extra.get("use_ring_of_experts", self.moe.dispatch == "ring"))

    @property
    def run_dir(self) -> str | None:
        """The run directory the config names: run.dir, else, for a cluster job with cluster.output, the same folder
        on that volume for every node and every restart (<path>/<cluster.name or experiment_name>), so that a
        restarted job resumes it. None: a new <run.base_dir>/<experiment>/<timestamp> per run."""
        if self.run.dir:
            return self.run.dir
        volume = self.cluster.output_volume
        if volume is None or self.cluster.row.one_host:
            return None
        return f"{volume.path.rstrip('/')}/{self.cluster.name or self.experiment_name}"

    @property
    def attention_kernel(self) -> str | None:
        """The attention kernel MaxText runs: maxtext.extra.attention over model.attention; None = MaxText's choice."""
        return str(self.maxtext.extra.get("attention", self.model.attention) or "") or None

    @property
    def maxtext_hardware(self) -> str:
        """MaxText's hardware key: cpu, gpu (one process per node) or gpu_multiprocess (one per GPU)."""
        if self.hardware.platform == "cpu":
            return "cpu"
        if self.cluster.processes_per_node > 1 or self.backend.te_block:
            return "gpu_multiprocess"
        return "gpu"

    @property
    def run_name(self) -> str:
        """MaxText's run_name: run.name, else the experiment name."""
        return self.run.name or self.experiment_name

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-compatible nested mappings (what run directories record and views show)."""
        return self.model_dump(mode="json")


def defaults(model: type[Section] = Config) -> dict[str, Any]:
    """Every default of the schema as one nested mapping: the only place defaults are written. Hydra composes it
    first (config.yaml's `base_config`), so every key can be set with a.b=value; group options and experiments
    then write only what they choose. Required fields have no entry; a required section gets its defaults."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            section = field.annotation
            if isinstance(section, type) and issubclass(section, Section) and (inner := defaults(section)):
                out[name] = inner
            continue
        value = field.get_default(call_default_factory=True)
        out[name] = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return out
