"""While XLA compiles the train step (tens of seconds to minutes, with no output of its own), one line that says
so and counts the seconds: updated in place on a terminal, repeated every `every_s` seconds in a log."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

TEXT = "moekit: compiling the train step… {s:.0f} s"


class Ticker:
    """start() when compilation begins, stop() when it ends (the compiled phase or the first step); idempotent."""

    def __init__(
        self,
        stream: TextIO | None = None,
        tty: bool | None = None,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty() if tty is None else tty
        self._every = 1.0 if self._tty else every_s
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False

    def start(self) -> None:
        """Begin counting (once); a daemon thread writes the line."""
        if self._thread is not None:
            return
        self._started = self._clock()
        self._thread = threading.Thread(target=self._run, name="moekit-compiling", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop counting and, on a terminal, clear the line so the next output starts clean."""
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=2)
        if self._tty and self._shown:
            self._write("\r\x1b[K")

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            line = TEXT.format(s=self._clock() - self._started)
            self._write(f"\r{line}" if self._tty else f"{line}\n")
            self._shown = True

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # a closed or full stream: the count is optional, the run is not
            self._stop.set()
