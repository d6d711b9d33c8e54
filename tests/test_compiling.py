"""The compiling line: XLA's silent minutes before the first step show a count of seconds."""

from __future__ import annotations

import io
import threading
import time

from moekit.run import compiling


def test_a_log_gets_a_line_every_interval_and_none_after_stop():
    out = io.StringIO()
    ticker = compiling.Ticker(out, tty=False, every_s=0.05)
    ticker.start()
    time.sleep(0.3)
    ticker.stop()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2 and all(ln.startswith("moekit: compiling the train step… ") for ln in lines)
    assert lines[-1].endswith(" s")
    time.sleep(0.15)
    assert out.getvalue().splitlines() == lines  # stopped: nothing more


def test_a_terminal_gets_one_line_updated_in_place_then_cleared():
    out = io.StringIO()
    ticker = compiling.Ticker(out, tty=True)
    ticker.start()
    time.sleep(1.2)
    ticker.stop()
    text = out.getvalue()
    assert "\n" not in text and text.startswith("\rmoekit: compiling the train step… 1 s")
    assert text.endswith("\r\x1b[K")


class _ClosedStream(io.StringIO):
    """A closed stream that counts the writes tried on it."""

    tried = 0

    def write(self, text):
        self.tried += 1
        raise ValueError("I/O operation on closed file")


def test_a_closed_stream_ends_the_count_quietly(monkeypatch):
    raised = []  # an exception that ends a thread reaches threading.excepthook, not the test
    monkeypatch.setattr(threading, "excepthook", raised.append)
    out = _ClosedStream()
    ticker = compiling.Ticker(out, tty=False, every_s=0.02)
    ticker.start()
    time.sleep(0.2)  # ten intervals
    ticker.stop()
    assert raised == []  # quietly: the failed write raised nothing out of the thread
    assert out.tried == 1  # the count ended at the first failed write instead of trying every interval
