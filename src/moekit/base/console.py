"""Third-party noise kept out of what moekit prints (pure): the log keeps every line; the console shows what
matters. A line is noise when it is a known library notice that says nothing about this run's outcome."""

from __future__ import annotations

import re
from collections.abc import Iterable

# Known notices, each with the library that prints it. An out-of-memory line is never noise (it is evidence).
NOISE = (
    r"PyTorch was not found\. Models won't be available",  # transformers, imported by MaxText's tokenizer code
    r"^[IW]\d{4} .*\b(autotun\w*|autotuner_util|gemm_algorithm_picker|conv_algorithm_picker)\b",  # XLA GPU autotuning
    r"Autotune cache|autotune_results|AutotuneResults",  # XLA's autotuning cache dumps
    r"^[IW]\d{4} .*\b(bfc_allocator|gpu_process_state|cuda_executor|gpu_device)\.cc:\d+\]",  # allocator chatter
)
_NOISE = re.compile("|".join(f"(?:{p})" for p in NOISE))
_EVIDENCE = re.compile(r"out of memory|RESOURCE_EXHAUSTED|OOM|Error|error|Traceback", re.I)


def is_noise(line: str) -> bool:
    """Whether a process's output line is a known third-party notice (and not evidence of a failure)."""
    return bool(_NOISE.search(line)) and not _EVIDENCE.search(line)


def meaningful(lines: Iterable[str]) -> list[str]:
    """The lines that are not noise, in order."""
    return [ln for ln in lines if not is_noise(ln)]
