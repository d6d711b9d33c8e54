"""Folders moekit makes beside an output (`checkpoint import/export --out`'s `<out>.partial`, `data prepare`'s
temporary shard folder): each is claimed while it is written, so that no other moekit removes it, and moekit
removes one only when it is its own and its writer is provably gone.

A claim is a marker file inside the folder, `MARKER`, holding the writer's pid and host, created under an
exclusive `flock` that its writer holds until it is done (the kernel drops it when the writer dies, however it
dies). A folder without the marker is not moekit's (a user's `.X.tmp-backup/`): it is never removed. One with the
marker is live while its lock is held, or while its writer (same host) still runs; a writer on another host cannot
be proven gone, so its folder is kept and named in the refusal.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from moekit.base import bounded, parse
from moekit.base.errors import MoekitError

MARKER = "moekit-partial"  # the claim file every folder of this kind holds while moekit writes it
MARKER_MAX_BYTES = 4096


class Claimed(MoekitError):
    """A folder is another writer's (live, or not provably gone) or not moekit's."""


@dataclass(frozen=True)
class State:
    """What a folder beside an output is: absent, not moekit's, live (its owner), or stale (safe to remove)."""

    kind: str  # "absent" | "foreign" | "link" | "live" | "stale" | "unknown"
    owner: str = ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, another user's
        return True
    return True


def state(folder: Path) -> State:
    """Whether `folder` may be removed (see the module's rule). Probes the lock without keeping it."""
    if folder.is_symlink():
        return State("link")
    if not folder.exists():
        return State("absent")
    if not folder.is_dir():
        return State("foreign")
    try:
        fh = bounded.open_regular(folder / MARKER, MARKER_MAX_BYTES, "claim file", follow=False)
    except (OSError, MoekitError):
        return State("foreign")
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return State("live", _owner(fh.read(MARKER_MAX_BYTES)))
        except OSError:
            pass
        return _judge(fh.read(MARKER_MAX_BYTES))


def _owner(raw: bytes) -> str:
    try:
        who = parse.json_text(raw, "claim file")
        return f"process {int(who['pid'])} on {str(who['host'])[:200]}"
    except (ValueError, KeyError, TypeError, OverflowError):
        return "an unknown process"


def _judge(raw: bytes) -> State:
    """A claim whose lock is free: stale when it names no writer (an older moekit's, which held none) or one of
    this host that is gone; 'unknown' when its writer is on another host (not provably gone)."""
    if not raw.strip():
        return State("stale")
    try:
        who = parse.json_text(raw, "claim file")
        pid, host = int(who["pid"]), str(who["host"])
    except (ValueError, KeyError, TypeError, OverflowError):
        return State("stale")
    if host != socket.gethostname():
        return State("unknown", _owner(raw))
    return State("live", _owner(raw)) if _alive(pid) else State("stale")


def remove_if_stale(folder: Path) -> bool:
    """Remove `folder` when it is moekit's and its writer is provably gone (the claim's lock is taken first, so two
    moekits never both remove it, nor one remove a folder another just claimed); whether it was removed."""
    try:
        fh = bounded.open_regular(folder / MARKER, MARKER_MAX_BYTES, "claim file", follow=False)
    except (OSError, MoekitError):
        return False
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        if folder.is_symlink() or _judge(fh.read(MARKER_MAX_BYTES)).kind != "stale":
            return False
        shutil.rmtree(folder, ignore_errors=True)  # never follows a link inside it
        return not folder.exists()


class Claim:
    """A folder this process made and holds (see claimed())."""

    def __init__(self, folder: Path, fd: int):
        self.folder, self._fd = folder, fd

    def release(self) -> None:
        """Drop the claim: the marker goes, then the lock (the folder is the caller's to rename or keep)."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            (self.folder / MARKER).unlink()
        os.close(self._fd)
        self._fd = -1


def claim(folder: Path) -> Claim:
    """Make `folder` (it must not exist) and claim it: the marker is written and locked under a temporary name,
    then renamed into place, so that no other moekit ever sees an unlocked marker of a live writer. OSError when it
    cannot be made (FileExistsError: another writer made it first)."""
    folder.mkdir()
    tmp = folder / f".{MARKER}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode() + b"\n")
        os.rename(tmp, folder / MARKER)
    except BaseException:
        os.close(fd)
        raise
    return Claim(folder, fd)


@contextlib.contextmanager
def claimed(folder: Path, what: str) -> Iterator[Claim]:
    """`folder`, made and claimed for the block (see claim); a stale folder of moekit's in the way is removed
    first; Claimed when one is live, not provably gone, a link or not moekit's. When the block fails, the folder
    is removed (it is this process's); when it succeeds, the caller renames it and releases the claim."""
    found = state(folder)
    if found.kind == "stale":
        remove_if_stale(folder)
        found = state(folder)
    if found.kind != "absent":
        raise Claimed(refusal(folder, found, what))
    try:
        held = claim(folder)
    except FileExistsError:
        raise Claimed(refusal(folder, state(folder), what)) from None
    try:
        yield held
    except BaseException:
        if held._fd >= 0:
            shutil.rmtree(folder, ignore_errors=True)
        held.release()
        raise
    held.release()


def refusal(folder: Path, found: State, what: str) -> str:
    """One line saying why `folder` is not touched, and the fix."""
    shown = bounded.shown(folder)
    if found.kind == "link":
        return (
            f"{shown} is a symbolic link: moekit writes no {what} through it; remove the link or choose another --out"
        )
    if found.kind == "live":
        return (
            f"{shown} is being written by {found.owner} right now ({what}); wait for it to end, or choose another --out"
        )
    if found.kind == "unknown":
        return (
            f"{shown} was left by {found.owner}, which moekit cannot see from here; if it has ended, remove the "
            "folder yourself, or choose another --out"
        )
    return f"{shown} exists and moekit did not make it (no {MARKER} file in it): move it away or choose another --out"
