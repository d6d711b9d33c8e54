"""The device mesh a plan is evaluated on: axis sizes inside a slice (ICI) and across slices (DCN)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from moekit.config.schema import Config

AXES = ("data", "fsdp", "tensor", "expert")  # MaxText's mesh order: the last (expert) varies fastest


@dataclass(frozen=True, slots=True)
class Mesh:
    """Axis sizes of the device mesh inside a slice (ICI) and across slices (DCN), and the NVLink domain size."""

    ici: dict[str, int] = field(default_factory=lambda: dict.fromkeys(AXES, 1))
    dcn: dict[str, int] = field(default_factory=lambda: dict.fromkeys(AXES, 1))
    domain: int | None = None
    """GPUs per NVLink domain (hardware.nvlink_domain); None: the ICI axes never leave one."""

    @classmethod
    def from_config(cls, cfg: Config) -> Mesh:
        """The config's mesh: ICI axes with -1 filled, DCN axes, the hardware's NVLink domain."""
        return cls(dict(cfg.ici_filled), dict(cfg.parallelism.dcn.items()), cfg.hardware.nvlink_domain)

    def off_domain(self, axes: tuple[str, ...]) -> float:
        """Share of a device's peers along these ICI axes that sit in another NVLink domain (0..1).

        Devices are numbered domain by domain (node by node), and the mesh's last axis varies fastest, so an
        inner axis (expert) stays inside a domain longest; averaged over the devices of one slice.
        """
        n = self.slice_devices
        if not self.domain or n <= self.domain:
            return 0.0
        strides, step = {}, 1
        for axis in reversed(AXES):
            strides[axis] = step
            step *= self.ici[axis]
        offsets = [0]
        for axis in axes:
            offsets = [o + k * strides[axis] for o in offsets for k in range(self.ici[axis])]
        peers = len(offsets) - 1
        if peers == 0:
            return 0.0
        outside = 0
        for device in range(n):
            base = device - sum(((device // strides[a]) % self.ici[a]) * strides[a] for a in axes)
            outside += sum((base + o) // self.domain != device // self.domain for o in offsets)
        return outside / (n * peers)

    def size(self, axis: str) -> int:
        """Devices along `axis` over the whole job: its ICI size x its DCN size."""
        return self.ici[axis] * self.dcn[axis]

    @property
    def devices(self) -> int:
        """Devices in the whole mesh."""
        return math.prod(self.ici.values()) * math.prod(self.dcn.values())

    @property
    def slice_devices(self) -> int:
        """Devices in one slice: the product of the ICI axes."""
        return math.prod(self.ici.values())

    def with_dcn(self, axis: str, size: int) -> Mesh:
        """This mesh with the DCN `axis` set to `size`."""
        return replace(self, dcn=self.dcn | {axis: size})

    def describe(self) -> str:
        """One line such as '16 devices: ICI fsdp 8, DCN fsdp 2' (axes of size 1 left out)."""
        ici = " x ".join(f"{k} {v}" for k, v in self.ici.items() if v > 1) or "1"
        dcn = " x ".join(f"{k} {v}" for k, v in self.dcn.items() if v > 1)
        return f"{self.devices} devices: ICI {ici}" + (f", DCN {dcn}" if dcn else "")
