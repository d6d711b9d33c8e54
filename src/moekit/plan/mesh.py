"""The device mesh a plan is evaluated on: axis sizes inside a slice (ICI) and across slices (DCN)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from moekit.config.schema import Config

AXES = ("data", "fsdp", "tensor", "expert")


@dataclass(frozen=True, slots=True)
class Mesh:
    ici: dict[str, int] = field(default_factory=lambda: dict.fromkeys(AXES, 1))
    dcn: dict[str, int] = field(default_factory=lambda: dict.fromkeys(AXES, 1))

    @classmethod
    def from_config(cls, cfg: Config) -> Mesh:
        return cls(dict(cfg.ici_filled), dict(cfg.parallelism.dcn.items()))

    def size(self, axis: str) -> int:
        return self.ici[axis] * self.dcn[axis]

    @property
    def devices(self) -> int:
        return math.prod(self.ici.values()) * math.prod(self.dcn.values())

    @property
    def slice_devices(self) -> int:
        return math.prod(self.ici.values())

    def with_dcn(self, axis: str, size: int) -> Mesh:
        return replace(self, dcn=self.dcn | {axis: size})

    def describe(self) -> str:
        ici = " x ".join(f"{k} {v}" for k, v in self.ici.items() if v > 1) or "1"
        dcn = " x ".join(f"{k} {v}" for k, v in self.dcn.items() if v > 1)
        return f"{self.devices} devices: ICI {ici}" + (f", DCN {dcn}" if dcn else "")
