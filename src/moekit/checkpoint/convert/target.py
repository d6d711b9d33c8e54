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

from moekit.checkpoint.model.hf import CheckpointError

MARKER = "moekit-partial"  # written first into every <out>.partial moekit makes


def partial(out: Path) -> Path:
    """The folder a conversion into `out` writes before it is renamed into place."""
    return out.with_name(out.name + ".partial")


def check(out: Path, verb: str) -> None:
    """Refuse `out` before anything is read: it exists, or its .partial is a link, a file or holds other files."""
    if out.exists() or out.is_symlink():
        raise CheckpointError(f"{out} exists: {verb} writes a new folder; choose another --out or move it away")
    tmp = partial(out)
    if tmp.is_symlink():
        raise CheckpointError(
            f"{tmp} is a symbolic link: moekit writes no checkpoint through it; remove the link or choose another --out"
        )
    if tmp.exists() and not (tmp.is_dir() and (tmp / MARKER).is_file()):
        raise CheckpointError(
            f"{tmp} exists and moekit did not make it (no {MARKER} file in it): move it away or choose another --out"
        )


@contextmanager
def writing(out: Path, verb: str) -> Iterator[Path]:
    """The empty `<out>.partial` to write into; renamed to `out` when the block ends, removed when it fails."""
    check(out, verb)
    tmp = partial(out)
    try:
        if tmp.exists():
            shutil.rmtree(tmp)  # an earlier conversion's leftover: it holds the marker
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        (tmp / MARKER).write_text("a conversion by moekit writes here; renamed when it is complete\n")
    except OSError as e:
        raise CheckpointError(
            f"cannot write {tmp} ({e.strerror or e}): choose an --out in a folder you can write"
        ) from None
    try:
        yield tmp
        (tmp / MARKER).unlink()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
