"""The device operations in a profiler trace (an .xplane.pb), read with JAX's own reader (jax.profiler.ProfileData).

GPU: one plane per device (/device:GPU:<n>), one line per CUDA stream ("Stream #<id>(...)"); each event is a
kernel or memcpy whose stats name the HLO instruction (hlo_op), its module and program id. CPU: XLA:CPU has no
device timeline; its thunks run on the host's XLA threads (/host:CPU, lines tf_XLAEigen/..., tf_XLAExecute/...)
and carry the same stats plus the device (device_ordinal) and the execution (run_id). docs/profiling.md says more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
CPU_PLANE = "/host:CPU"
# Lines xprof derives from the stream lines when it processes a trace (present only in processed traces): reading
# them as well would count every kernel twice.
_DERIVED_LINES = ("XLA Ops", "XLA Modules", "Steps", "Framework", "Source", "TensorFlow", "XLA TraceMe")


@dataclass(frozen=True, slots=True)
class Event:
    """One device operation of the trace: where it ran, when (ns), and what HLO instruction it executed."""

    device: str
    """gpu:<n> or cpu:<device_ordinal>."""
    line: str
    """The stream (GPU) or host thread (CPU) it ran on."""
    start_ns: float
    end_ns: float
    name: str
    """Kernel / memcpy name on GPU, the thunk's HLO instruction on CPU."""
    hlo_op: str = ""
    module: str = ""
    program_id: int | None = None
    run_id: int | None = None
    details: str = ""
    """GPU memcpy events: kind_src:... kind_dst:... size:..."""
    op_name: str = ""
    """GPU: the op name XLA annotated the launch with (op_name, or name: op_name less the module-wide prefix)."""


class TraceError(Exception):
    """A trace file that JAX's reader cannot open."""


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _stats(event) -> dict:
    return {k: v for k, v in event.stats if k is not None}


def read(path: Path) -> list[Event]:
    """Every device operation in one trace file: GPU stream events, or the CPU thunks that name an HLO instruction."""
    from jax.profiler import ProfileData

    try:
        data = ProfileData.from_file(str(path))
    except Exception as exc:  # the reader raises its own runtime errors for unreadable or truncated files
        raise TraceError(f"{path}: JAX's profile reader could not read it ({exc})") from None
    out: list[Event] = []
    for plane in data.planes:
        gpu = GPU_PLANE.match(plane.name)
        if gpu:
            for line in plane.lines:
                if line.name.startswith(_DERIVED_LINES) or not line.name.startswith("Stream"):
                    continue
                for e in line.events:
                    s = _stats(e)
                    out.append(
                        Event(
                            f"gpu:{gpu.group(1)}",
                            line.name,
                            e.start_ns,
                            e.start_ns + e.duration_ns,
                            e.name,
                            str(s.get("hlo_op", "")),
                            str(s.get("hlo_module", "")),
                            _int(s.get("program_id")),
                            _int(s.get("run_id")),
                            str(s.get("memcpy_details", "")),
                            str(s.get("op_name") or s.get("name") or ""),
                        )
                    )
        elif plane.name == CPU_PLANE:
            for line in plane.lines:
                for e in line.events:
                    s = _stats(e)
                    if "hlo_op" not in s:  # executor and thread-pool bookkeeping, Python frames
                        continue
                    out.append(
                        Event(
                            f"cpu:{s.get('device_ordinal', 0)}",
                            line.name,
                            e.start_ns,
                            e.start_ns + e.duration_ns,
                            e.name,
                            str(s["hlo_op"]),
                            str(s.get("hlo_module", "")),
                            _int(s.get("program_id")),
                            _int(s.get("run_id")),
                        )
                    )
    return out
