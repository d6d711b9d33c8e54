"""The folder a conversion writes (`--out`): written as `<out>.partial` beside it, then renamed into place.

Nothing beside `--out` is deleted or written through: a `<out>.partial` that moekit did not make (no marker file in
it: the user's files) is refused, not removed; one that is a symbolic link is refused, not followed. Whether the
folder can be made is tried before the conversion starts, so a read-only volume costs no conversion.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from moekit.base import failures
from moekit.checkpoint.model.hf import CheckpointError
from moekit.rundir import claims

MARKER = claims.MARKER  # the claim every <out>.partial moekit makes holds while it is written


def partial(out: Path) -> Path:
    """The folder a conversion into `out` writes before it is renamed into place."""
    return out.with_name(out.name + ".partial")


def check(out: Path, verb: str) -> None:
    """Refuse `out` before anything is read: it exists, or its .partial is a link, a file, holds other files, or is
    another conversion's that is running (or whose end cannot be proven: its writer is on another host)."""
    if out.exists() or out.is_symlink():
        raise CheckpointError(f"{out} exists: {verb} writes a new folder; choose another --out or move it away")
    found = claims.state(partial(out))
    if found.kind not in ("absent", "stale"):
        raise CheckpointError(claims.refusal(partial(out), found, "checkpoint"))


def room(out: Path, verb: str, need: int) -> None:
    """Refuse before converting when the disk `out` goes on has less free space than the `need` bytes the
    conversion writes (with a tenth more for the writers' metadata): a full disk found mid-write costs the
    conversion and fills the console with the writers' background errors."""
    free = shutil.disk_usage(out.parent).free
    if free < need * 1.1:
        raise CheckpointError(
            f"{verb} writes about {need / 2**20:,.1f} MiB into {out.parent}, whose disk has {free / 2**20:,.1f} MiB "
            "free; nothing was written. Free space there or choose an --out on another disk"
        )


@contextmanager
def writing(out: Path, verb: str, need: int = 0) -> Iterator[Path]:
    """The empty `<out>.partial` to write into, claimed for this conversion (rundir/claims.py: a live one of another
    moekit is never removed, a dead one's is); renamed to `out` when the block ends, removed when it fails. `need`:
    the bytes it will write, refused up front where the disk lacks them (room)."""
    check(out, verb)
    tmp = partial(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with claims.claimed(tmp, "checkpoint") as held:  # can the folder be made at all: before its room
            room(out, verb, need)
            yield tmp
            held.release()  # the marker goes before the folder takes its name
            try:
                tmp.rename(out)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    except claims.Claimed as e:
        raise CheckpointError(str(e)) from None
    except Exception as e:  # noqa: BLE001 - a full disk reads differently in each writer (OS, TensorStore, Orbax)
        full = failures.disk_full(e)
        if full is None and not isinstance(e, OSError):
            raise
        if full is not None and not tmp.exists():
            raise CheckpointError(
                f"cannot write {out}: the disk is full ({full}); nothing was kept. Free space there or choose an "
                "--out on another disk"
            ) from None
        if out.exists() or tmp.exists():
            raise
        raise CheckpointError(
            f"cannot write {tmp} ({e.strerror or e}): choose an --out in a folder you can write"
        ) from None
