"""Read a file the user or a run directory names, never more than a stated size (effect: reads files).

Every file moekit reads has a size bound: a record, a metrics file or a CRD that turns out to be /dev/zero, a
many-gigabyte log or a named pipe must end in a message, not in the host's memory or a hang.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from moekit.base.errors import MoekitError

MiB = 1024 * 1024


class TooLarge(MoekitError):
    """A file is larger than moekit reads for its purpose, or is not a regular file."""


def read_bytes(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them; TooLarge when it holds more or is not a
    regular file (a device, a pipe: /dev/zero never ends, a pipe may never answer). OSError when it cannot be
    opened (absent, unreadable), for the caller to explain."""
    path = Path(path)
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        raise TooLarge(
            f"{path} is not a regular file (a device, pipe or socket); moekit reads a {what} only from a file.\n"
            f"  fix: save the {what} to a file first and give that path"
        )
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(
            f"{path} holds more than {limit:,} bytes, the most moekit reads for a {what}; it is not one moekit "
            f"wrote or expects.\n  fix: give the right file (a {what} is far smaller), or cut it down"
        )
    return data


def read_text(path: str | Path, limit: int, what: str = "file", errors: str = "strict") -> str:
    """read_bytes decoded as UTF-8 (`errors` as for bytes.decode)."""
    return read_bytes(path, limit, what).decode("utf8", errors=errors)
