"""Progress of long work on the host (shard writing, checkpoint conversion): one bar or line per tenth, on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """A progress bar on a terminal (redrawn in place), else a plain line at every tenth of the work. `scale`
    divides the counts shown (1e6 with `what`="MB": bytes shown as megabytes)."""

    def __init__(self, total: int, what: str, stream: TextIO | None = None, scale: float = 1):
        self.total, self.what, self.scale = max(total, 1), what, scale
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.shown = -1
        self.start = time.monotonic()

    def update(self, done: int, note: str = "") -> None:
        """Show `done` of the total (`note`: running counts)."""
        frac = min(done / self.total, 1.0)
        elapsed = time.monotonic() - self.start
        count = f"{done}/{self.total}" if self.scale == 1 else f"{done / self.scale:.1f}/{self.total / self.scale:.1f}"
        if self.tty:
            bar = "#" * int(frac * 30)
            self.stream.write(f"\r[{bar:<30}] {count} {self.what}  {note}  {elapsed:.0f} s\x1b[K")
            if done >= self.total:
                self.stream.write("\n")
        elif int(frac * 10) > self.shown:
            self.shown = int(frac * 10)
            self.stream.write(f"{frac:4.0%} {count} {self.what}  {note}  ({elapsed:.0f} s)\n")
        self.stream.flush()
