"""The accelerator: one row per GPU generation, its peaks, features and link classes."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from moekit.base import quantities
from moekit.config.kinds.hardware import link_classes
from moekit.config.sections.base import Scalar, Section


class Peaks(Section):
    """Datasheet dense peaks per device, the denominators of MFU."""

    bf16: quantities.Field("peak_tflops") | None
    """Dense BF16 peak, TFLOP/s per device; None where no meaningful peak exists (CPU)."""
    fp8: quantities.Field("peak_tflops") | None
    """Dense FP8 peak, TFLOP/s per device; None where no meaningful peak exists (CPU)."""


class Features(Section):
    """The low-precision formats the tensor cores run."""

    fp8: bool
    """FP8 tensor cores (Hopper and newer)."""
    mxfp8: bool
    """Block-scaled MXFP8 tensor cores (Blackwell only)."""


class HardwareLinks(Section):
    """A GPU's link classes, each a name in src/moekit/data/links.yaml `links:` (its rate and source live there)."""

    scale_up: str
    """Inside the NVLink domain (the NVLink generation, e.g. nvlink5)."""
    scale_out: str
    """Across NVLink domains: the network port per GPU (e.g. cx8_800g)."""
    host: str
    """GPU to host memory: the offload path (e.g. pcie5_x16, nvlink_c2c)."""

    @model_validator(mode="after")
    def _known(self) -> HardwareLinks:
        known = link_classes()
        for role, name in (("scale_up", self.scale_up), ("scale_out", self.scale_out), ("host", self.host)):
            if name not in known:
                raise ValueError(
                    f"links.{role}={name!r} is not a link class of src/moekit/data/links.yaml (it has: "
                    f"{', '.join(known)}); name one of them, or add its row there (gb_per_s, source)"
                )
        return self


# What a GPU generation's row (conf/hardware/<option>.yaml) must state: every fact plan, MFU and the fabric check read.
GPU_FACTS = ("sm", "hbm_gib", "hbm_tb_per_s", "hbm_source", "nvlink_domain", "links", "host_gib_per_gpu", "host_source")


class Hardware(Section):
    """The accelerator: one row per generation (option hardware=, conf/hardware/<option>.yaml) holding its platform,
    architecture, HBM size and bandwidth, NVLink domain, link classes, host memory, peaks, features and env."""

    name: str
    """Hardware option name (cpu, h100, h200, b200, gb200, gb300)."""
    platform: Literal["cpu", "gpu"]
    """JAX platform."""
    arch: str
    """Architecture family (cpu, hopper, blackwell)."""
    sm: quantities.Field("sm") | None = None
    """CUDA compute capability as an integer (90 = 9.0); None on CPU."""
    hbm_gib: quantities.Field("hbm_gib") | None = None
    """Device memory per GPU, GiB; None on CPU."""
    hbm_tb_per_s: quantities.Field("hbm_tb_per_s") | None = None
    """HBM bandwidth per GPU, TB/s (datasheet): the forecast's memory-bound parts; None on CPU."""
    hbm_source: str | None = None
    """Citation of the HBM bandwidth."""
    nvlink_domain: quantities.Field("nvlink_domain") | None = None
    """GPUs that share one NVLink domain (8: an HGX/DGX node; 72: a GB200/GB300 NVL72 rack); None on CPU.
    The ICI axes (parallelism.ici) should fit in one; what crosses domains runs over the slower network."""
    links: HardwareLinks | None = None
    """The link classes inside and across NVLink domains and to the host; None on CPU."""
    host_gib_per_gpu: quantities.Field("host_gib_per_gpu") | None = None
    """Host memory per GPU, GiB: the limit of offloaded activations; None on CPU."""
    host_source: str | None = None
    """Citation of the host memory size."""
    peak_tflops: Peaks
    """Datasheet peaks used for MFU."""
    peak_source: str
    """Citation of the peak numbers."""
    features: Features
    """What the tensor cores support."""
    low_precision: Literal["mxfp8", "fp8", "bf16"]
    """The lowest GEMM precision the tensor cores run natively: what precision=low resolves to (mxfp8 on Blackwell,
    fp8 on Hopper)."""
    env: dict[str, Scalar] = {}
    """Runtime environment specific to this hardware."""

    @model_validator(mode="after")
    def _complete(self) -> Hardware:
        if self.platform != "gpu":
            return self
        missing = [k for k in GPU_FACTS if getattr(self, k) is None]
        missing += ["peak_tflops.bf16"] if self.peak_tflops.bf16 is None else []
        missing += ["peak_tflops.fp8"] if self.features.fp8 and self.peak_tflops.fp8 is None else []
        if missing:
            raise ValueError(
                f"hardware={self.name} lacks {', '.join(missing)}: a GPU generation's row "
                f"(conf/hardware/{self.name}.yaml) states every one (docs/extending.md, 'A hardware generation')"
            )
        return self
