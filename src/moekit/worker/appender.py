"""An append-only JSON-lines file a training process writes its records to (step events, routing counts)."""

from __future__ import annotations

import json
import threading
from typing import Any


class Appender:
    """One JSON object a line, flushed as it is written, from any thread. After a failed write (a full disk) it
    writes nothing more: training goes on (MaxText meets the disk itself), the record stops there."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf8")  # noqa: SIM115 (open for the life of the process)
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        """Append `record` as one line."""
        with self._lock:
            if self._file is None:
                return
            try:
                self._file.write(json.dumps(record) + "\n")
                self._file.flush()
            except OSError:
                self._file = None
