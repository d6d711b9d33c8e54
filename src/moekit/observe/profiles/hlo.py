"""What each instruction of a compiled XLA program is, read from XLA's own HLO text dump (--xla_dump_to).

A trace event names only its HLO instruction (`fusion.12`); the dump says what that instruction is: its opcode,
the opcodes it fuses, its custom-call target, its op_name (JAX's name stack, with MaxText's named scopes) and the
Python functions that produced it (the dump's stack-frame tables). Reading the dump is pure; finding it is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from moekit.base import bounded

AFTER_OPTIMIZATIONS = "after_optimizations.txt"  # module_<id>.<name>.<backend>_after_optimizations.txt
THUNK_SEQUENCE = "thunk_sequence_after_thunk_passes.txt"  # module_<id>.<name>.<this>: XLA:GPU's thunks, nested
THUNK_METADATA = "thunk_metadata.txt"  # module_<id>.<name>.<this>: each thunk's id and instruction
GEMM_THUNKS = frozenset({"kCublasLtMatmul", "kGemm"})

_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_OPCODE = re.compile(r"\s*([\w\-]+)\(")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")
_CALLS = re.compile(r"\b(?:calls|to_apply|body|condition|branch_computations)=(\{[^}]*\}|%?[\w.\-]+)")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_TABLE_ROW = re.compile(r"^(\d+)\s+(.*)$")
_MAX_FRAMES = 64


@dataclass(frozen=True, slots=True)
class Instruction:
    """One HLO instruction of the dump: its name, opcode and what it was built from."""

    name: str
    opcode: str
    op_name: str = ""
    """JAX's name stack (jit(train_step)/jvp()/.../weight_sum/dot_general): transformations and named scopes."""
    frames: tuple[str, ...] = ()
    """Python functions that built it, innermost first (MaxText's RoutedMoE.unpermute, ...)."""
    fused: frozenset[str] = frozenset()
    """Opcodes inside the computations it calls (a fusion's body, a while loop's body), transitively."""
    target: str = ""
    """custom_call_target of a custom call (__cublas$gemm, __cudnn$fmha..., mosaic_gpu, ...)."""


DUMP_MAX_BYTES = 2 << 30  # an XLA dump of a large model's train step is tens of MB


def _skip_shape(text: str) -> str:
    """The text after an instruction's result shape (a tuple shape nests parentheses)."""
    text = text.lstrip()
    if not text.startswith("("):
        return text.split(" ", 1)[1] if " " in text else ""
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return text[i + 1 :]
    return ""


def _tables(lines: list[str]) -> dict[str, dict[int, str]]:
    """The dump's FileNames / FunctionNames / FileLocations / StackFrames tables (id -> row text)."""
    tables: dict[str, dict[int, str]] = {}
    current = None
    for line in lines:
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = tables.setdefault(line, {})
        elif not line.strip() or line.startswith(("ENTRY", "%", "HloModule")):
            current = None
        elif current is not None and (m := _TABLE_ROW.match(line)):
            current[int(m.group(1))] = m.group(2)
    return tables


def _field(row: str, key: str) -> int:
    m = re.search(rf"\b{key}=(\d+)", row)
    return int(m.group(1)) if m else 0


def _frame_chains(tables: dict[str, dict[int, str]]) -> dict[int, tuple[str, ...]]:
    """stack_frame_id -> function names, innermost first. The printed parent_frame_id is the parent's id + 1
    (1 means none), as XLA's own parser reads it."""
    functions = {i: row.strip().strip('"') for i, row in tables.get("FunctionNames", {}).items()}
    locations = {i: _field(row, "function_name_id") for i, row in tables.get("FileLocations", {}).items()}
    frames = tables.get("StackFrames", {})
    chains: dict[int, tuple[str, ...]] = {}
    for start in frames:
        names, seen, frame = [], set(), start
        while frame and frame in frames and frame not in seen and len(names) < _MAX_FRAMES:
            seen.add(frame)
            names.append(functions.get(locations.get(_field(frames[frame], "file_location_id"), 0), "?"))
            frame = _field(frames[frame], "parent_frame_id") - 1
        chains[start] = tuple(names)
    return chains


def parse(text: str) -> dict[str, Instruction]:
    """Instruction name -> Instruction, for every computation of one module's dump."""
    lines = text.splitlines()
    chains = _frame_chains(_tables(lines))
    raw: dict[str, tuple[str, str, int, list[str], str]] = {}
    members: dict[str, list[str]] = {}  # computation -> its instructions
    computation = ""
    for line in lines:
        if line.startswith("}"):
            computation = ""
            continue
        if not line.startswith(" ") and (m := _COMPUTATION.match(line)) and " = " not in line.split("{", 1)[0]:
            computation = m.group(1)
            members.setdefault(computation, [])
            continue
        if not computation or not (m := _INSTR.match(line)):
            continue
        name, rest = m.group(1), _skip_shape(m.group(2))
        op = _OPCODE.match(rest)
        if not op:
            continue
        called = [c.strip(" {}%") for grp in _CALLS.findall(rest) for c in grp.split(",") if c.strip(" {}%")]
        frame = _FRAME_ID.search(rest)
        op_name = _OP_NAME.search(rest)
        target = _TARGET.search(rest)
        raw[name] = (
            op.group(1),
            op_name.group(1).replace("\\'", "'") if op_name else "",
            int(frame.group(1)) if frame else 0,
            called,
            target.group(1) if target else "",
        )
        members[computation].append(name)

    fused_cache: dict[str, frozenset[str]] = {}

    def inside(comp: str, depth: int = 0) -> frozenset[str]:
        if comp in fused_cache or depth > 32:
            return fused_cache.get(comp, frozenset())
        out: set[str] = set()
        for member in members.get(comp, []):
            out.add(raw[member][0])
            for sub in raw[member][3]:
                out |= inside(sub, depth + 1)
        fused_cache[comp] = frozenset(out)
        return fused_cache[comp]

    out = {}
    for name, (opcode, op_name, frame, called, target) in raw.items():
        fused = frozenset().union(*(inside(c) for c in called)) if called else frozenset()
        out[name] = Instruction(name, opcode, op_name, chains.get(frame, ()), fused, target)
    return out


def kernel_name(instruction: str) -> str:
    """The name XLA:GPU gives the kernel it emits for an instruction: the name with `.` and `-` made `_`."""
    return re.sub(r"[^A-Za-z0-9_]", "_", instruction)


def by_kernel(table: dict[str, Instruction]) -> dict[str, Instruction]:
    """Kernel name -> the instruction that emitted it, for names only one instruction gives.

    Inside a command buffer (a CUDA graph XLA:GPU records for a run of thunks) the trace's hlo_op names the command
    buffer (command_buffer_415), not the instruction; the kernel name still says which fusion ran. cuBLAS kernels
    (nvjet_*) carry no instruction name and stay unresolved.
    """
    names: dict[str, list[Instruction]] = {}
    for ins in table.values():
        names.setdefault(kernel_name(ins.name), []).append(ins)
    return {k: found[0] for k, found in names.items() if len(found) == 1}


_THUNK_LINE = re.compile(r"^(\s*)(\d+): (k\w+)")
_METADATA = re.compile(r"thunk_metadata \{(.*?)\n\}", re.S)


def command_buffer_gemms(sequence: str, metadata: str) -> dict[str, tuple[str, ...]]:
    """Command buffer -> the instructions of the cuBLAS GEMMs it runs, from XLA:GPU's thunk dumps (pure).

    The thunk sequence nests each command buffer's thunks under it; XLA names a command buffer after its first
    thunk's id (command_buffer_110 starts with thunk 110), and the metadata gives each thunk id its instruction.
    """
    instruction = {}
    for block in _METADATA.findall(metadata):
        thunk, annotation = re.search(r"thunk_id: (\d+)", block), re.search(r'profile_annotation: "([^"]*)"', block)
        if thunk and annotation:
            instruction[int(thunk.group(1))] = annotation.group(1)
    out: dict[str, list[str]] = {}
    block_indent, gemms = -1, None
    for line in sequence.splitlines():
        m = _THUNK_LINE.match(line)
        if not m:
            continue
        indent, thunk, kind = len(m.group(1)), int(m.group(2)), m.group(3)
        if gemms is not None and indent <= block_indent:
            gemms = None  # the command buffer's thunks ended
        if kind == "kCommandBuffer":
            block_indent, gemms = indent, []
            first = True
            continue
        if gemms is not None:
            if first:
                out[f"command_buffer_{thunk}"], first = gemms, False
            if kind in GEMM_THUNKS and thunk in instruction:
                gemms.append(instruction[thunk])
    return {name: tuple(found) for name, found in out.items()}


def find_dump(folder: Path, module: str, program_id: int | None) -> Path | None:
    """The after-optimizations dump of `module` (program_id: XLA's unique module id, which names the file)."""
    if not folder.is_dir():
        return None
    found = sorted(folder.glob(f"module_*.{module}.*{AFTER_OPTIMIZATIONS}"))
    if program_id is not None:
        exact = [p for p in found if p.name.startswith(f"module_{program_id:04d}.")]
        if exact:
            return exact[0]
    return found[-1] if found else None


def find_thunks(dump: Path) -> tuple[Path, Path] | None:
    """The thunk sequence and metadata XLA:GPU wrote beside an after-optimizations dump (none on CPU)."""
    prefix = ".".join(dump.name.split(".")[:2])  # module_<id>.<name>
    found = (dump.with_name(f"{prefix}.{THUNK_SEQUENCE}"), dump.with_name(f"{prefix}.{THUNK_METADATA}"))
    return found if all(p.is_file() for p in found) else None


def load(folder: Path, module: str, program_id: int | None) -> dict[str, Instruction]:
    """The instructions of one module from a dump folder; empty when XLA dumped nothing (nothing to classify by)."""
    path = find_dump(folder, module, program_id)
    return parse(read(path)) if path else {}


def read(path: Path) -> str:
    """A dump file's text, within DUMP_MAX_BYTES (bounded: one open, a regular file)."""
    return bounded.read_text(path, DUMP_MAX_BYTES, "XLA dump file", errors="replace")
