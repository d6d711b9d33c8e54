"""Read a file the user or a run directory names, never more than a stated size (effect: reads files).

Every file moekit reads has a size bound: a record, a metrics file or a CRD that turns out to be /dev/zero, a
many-gigabyte log or a named pipe must end in a message, not in the host's memory or a hang. A file is opened once:
the checks (a regular file, its size) are made with fstat on the handle that is then read, so nothing swapped in
between the check and the read (a link to /dev/zero, a pipe) is ever read.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path
from typing import BinaryIO

from moekit.base.errors import MoekitError

MiB = 1024 * 1024


class TooLarge(MoekitError):
    """A file is larger than moekit reads for its purpose, or is not a regular file (or is a link where none is
    expected)."""


def shown(path: str | Path) -> str:
    """`path` as printed in a message: a name holding a newline, an escape code or another control character is
    shown escaped (repr-style), so that it can neither start a new line nor recolour the terminal."""
    text = str(path)
    if text.isprintable():
        return text
    return repr(text)[1:-1]


def open_regular(path: str | Path, limit: int | None, what: str = "file", follow: bool = True) -> BinaryIO:
    """The regular file at `path`, opened once for reading; TooLarge when it is not a regular file (a device, a
    pipe: /dev/zero never ends, a pipe may never answer; opened without blocking, so a pipe never hangs the
    caller), is larger than `limit` bytes (None: any size, for a reader that streams), or, with `follow=False`, is
    a symbolic link. OSError when it cannot be opened (absent, unreadable), for the caller to explain."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and exc.errno == errno.ELOOP:
            raise TooLarge(
                f"{shown(path)} is a symbolic link; moekit reads a {what} only from the file itself, never through "
                f"a link.\n  fix: replace the link with the file it points to"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TooLarge(
                f"{shown(path)} is not a regular file (a device, pipe or socket); moekit reads a {what} only from a "
                f"file.\n  fix: save the {what} to a file first and give that path"
            )
        if limit is not None and st.st_size > limit:
            raise _too_large(path, limit, what)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _too_large(path: str | Path, limit: int, what: str) -> TooLarge:
    return TooLarge(
        f"{shown(path)} holds more than {limit:,} bytes, the most moekit reads for a {what}; it is not one moekit "
        f"wrote or expects.\n  fix: give the right file (a {what} is far smaller), or cut it down"
    )


def read_bytes(path: str | Path, limit: int, what: str = "file", follow: bool = True) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them, read from the handle that was checked
    (open_regular); TooLarge when it holds more (it may grow after the check: the read stops at `limit` + 1)."""
    with open_regular(path, limit, what, follow) as fh:
        # Read what the checked size says (one more byte shows growth), never read(limit + 1): Python allocates a
        # buffer of the size asked for before reading, so each read would reserve `limit` bytes (a GiB for a text).
        want = min(limit, os.fstat(fh.fileno()).st_size) + 1
        data = fh.read(want)
        if len(data) == want <= limit:  # it grew after the check: on, in blocks, up to limit + 1
            parts, got = [data], len(data)
            while got <= limit and (block := fh.read(min(limit + 1 - got, MiB))):
                parts.append(block)
                got += len(block)
            data = b"".join(parts)
    if len(data) > limit:
        raise _too_large(path, limit, what)
    return data


def read_text(path: str | Path, limit: int, what: str = "file", errors: str = "strict", follow: bool = True) -> str:
    """read_bytes decoded as UTF-8 (`errors` as for bytes.decode)."""
    return read_bytes(path, limit, what, follow).decode("utf8", errors=errors)


def lines(path: str | Path, limit: int, what: str = "file", line_limit: int = MiB) -> BinaryIOLines:
    """The lines of the regular file at `path` (bytes, newline kept), streamed from one handle: at most `limit`
    bytes in all and `line_limit` per line (a longer line is cut there and its rest skipped), so a reader of a
    many-gigabyte file holds one line at a time. TooLarge/OSError as open_regular."""
    return BinaryIOLines(open_regular(path, limit, what), limit, line_limit)


class BinaryIOLines:
    """An iterator of a file's lines within bounds (see lines()); a context manager closing its handle."""

    def __init__(self, fh: BinaryIO, limit: int, line_limit: int):
        self.fh, self.left, self.line_limit = fh, limit, line_limit

    def __enter__(self) -> BinaryIOLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.fh.close()

    def __iter__(self) -> BinaryIOLines:
        return self

    def __next__(self) -> bytes:
        if self.left <= 0:
            raise StopIteration
        line = self.fh.readline(min(self.line_limit, self.left))
        if not line:
            raise StopIteration
        self.left -= len(line)
        if not line.endswith(b"\n") and len(line) == self.line_limit:  # skip the rest of an overlong line
            while (more := self.fh.readline(self.line_limit)) and not more.endswith(b"\n"):
                self.left -= len(more)
            self.left -= len(more)
        return line


def open_text(path: str | Path, limit: int | None, what: str = "file", errors: str = "strict") -> io.TextIOWrapper:
    """open_regular as UTF-8 text, for a reader that streams lines (a data file: a pipe is refused, never read)."""
    return io.TextIOWrapper(open_regular(path, limit, what), encoding="utf-8", errors=errors)
