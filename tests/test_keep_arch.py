"""benchmarks/te_h200/keep_arch.py: only the kept architecture's device code survives, layout untouched."""

import importlib.util
import struct
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "keep_arch", Path(__file__).resolve().parents[1] / "benchmarks" / "te_h200" / "keep_arch.py"
)
keep_arch = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(keep_arch)

ENTRY_HEADER = 64


def entry(sm: int, payload: bytes) -> bytes:
    fields = [0] * (ENTRY_HEADER // 4)
    fields[keep_arch.ARCH_FIELD] = sm
    head = bytearray(struct.pack(f"<{len(fields)}I", *fields))
    struct.pack_into("<HHIQ", head, 0, 2, 0, ENTRY_HEADER, len(payload))  # kind 2 = ELF cubin
    return bytes(head) + payload


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", keep_arch.FATBIN_MAGIC, 1, 16, len(body)) + body


def test_zeroes_other_architectures_and_keeps_offsets():
    a = fatbin(entry(80, b"\x11" * 24), entry(90, b"\x22" * 16), entry(100, b"\x33" * 8))
    b = fatbin(entry(90, b"\x44" * 8), entry(120, b"\x55" * 32))
    lead, pad = b"HOSTCODE", b"\0" * 8  # section starts after other bytes; fatbins are 8-byte aligned
    data = bytearray(lead + a + pad + b)
    before = len(data)

    seen = keep_arch.keep_arch(data, len(lead), len(a) + len(pad) + len(b), 90)

    assert len(data) == before and data.startswith(lead)
    assert seen == {80: [1, 24], 90: [2, 24], 100: [1, 8], 120: [1, 32]}
    for byte, kept in ((0x11, False), (0x22, True), (0x33, False), (0x44, True), (0x55, False)):
        assert (bytes([byte]) * 8 in data) is kept, hex(byte)


def test_refuses_a_library_without_the_architecture(tmp_path, monkeypatch, capsys):
    lib = tmp_path / "lib.so"
    blob = fatbin(entry(80, b"\x11" * 8))
    lib.write_bytes(blob)
    monkeypatch.setattr(keep_arch, "fatbin_sections", lambda path: [(0, len(blob))])
    monkeypatch.setattr("sys.argv", ["keep_arch", "--arch", "90", str(lib)])
    assert keep_arch.main() == 1
    assert "no sm_90 code" in capsys.readouterr().err
    assert lib.read_bytes() == blob  # left as is


def test_library_without_device_code_is_left_alone(tmp_path, monkeypatch, capsys):
    lib = tmp_path / "host_only.so"
    lib.write_bytes(b"\x7fELF plain host code")
    monkeypatch.setattr(keep_arch, "fatbin_sections", lambda path: [])
    monkeypatch.setattr("sys.argv", ["keep_arch", "--arch", "90", str(lib)])
    assert keep_arch.main() == 0
    assert "no device code" in capsys.readouterr().out
