"""Zero the device code of every GPU architecture but one in shared libraries' device-code sections.

    python keep_arch.py --arch 90 libtransformer_engine.so libnccl.so.2 ...

TE's and NCCL's wheels carry machine code for sm_75 ... sm_120, already compressed, so the pack for one
H200 would be ~450 MB. The CUDA runtime loads only the entry built for the device's architecture, so
zeroing the others' payloads (headers and offsets untouched) leaves a library that runs on that
architecture and compresses to a fraction. Rewrites the files in place; prints what it kept.
"""

from __future__ import annotations

import argparse
import re
import struct
import subprocess
import sys
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
ARCH_FIELD = 7  # uint32 index of the SM architecture in a fatbin entry header (e.g. 90 for sm_90)


def fatbin_sections(path: Path) -> list[tuple[int, int]]:
    """(file offset, size) of each device-code section: .nv_fatbin, and __nv_relfatbin (relocatable code)."""
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    found = re.finditer(r"(?:\.nv_fatbin|__nv_relfatbin)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", out)
    return [(int(m.group(1), 16), int(m.group(2), 16)) for m in found]


def keep_arch(data: bytearray, start: int, size: int, arch: int) -> dict[int, list[int]]:
    """Zero foreign-architecture payloads in data[start:start+size]; {arch: [entries, bytes]} seen."""
    seen: dict[int, list[int]] = {}
    pos, end = start, start + size
    while pos + 16 <= end:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:  # fatbins are 8-byte aligned with padding between them
            pos += 8
            continue
        entry, entries_end = pos + header_size, pos + header_size + fat_size
        while entry < entries_end:
            _kind, _flags, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            sm = struct.unpack_from("<I", data, entry + 4 * ARCH_FIELD)[0]
            stat = seen.setdefault(sm, [0, 0])
            stat[0] += 1
            stat[1] += payload
            if sm != arch:
                body = entry + entry_header
                data[body : body + payload] = bytes(payload)
            entry += entry_header + payload
        pos = entries_end
    return seen


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, required=True, help="SM architecture to keep, e.g. 90 (H100/H200)")
    p.add_argument("libraries", nargs="+", type=Path)
    a = p.parse_args()
    for lib in a.libraries:
        sections = fatbin_sections(lib)
        if not sections:
            print(f"{lib.name}: no device code")
            continue
        data = bytearray(lib.read_bytes())
        seen: dict[int, list[int]] = {}
        for section in sections:
            for sm, (n, b) in keep_arch(data, *section, a.arch).items():
                seen.setdefault(sm, [0, 0])
                seen[sm][0] += n
                seen[sm][1] += b
        if a.arch not in seen:
            print(f"{lib.name}: no sm_{a.arch} code among {sorted(seen)}; left as is", file=sys.stderr)
            return 1
        lib.write_bytes(data)
        mib = {sm: round(b / 2**20, 1) for sm, (_, b) in sorted(seen.items())}
        zeroed = sum(mib.values()) - mib[a.arch]
        print(f"{lib.name}: kept sm_{a.arch} ({mib[a.arch]} MiB), zeroed {zeroed:.1f} MiB of {mib}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
