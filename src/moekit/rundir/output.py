"""Files moekit writes where a user asks (`moekit render -o FILE`, --refresh): replaced atomically, mode kept."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from moekit.base.errors import MoekitError
from moekit.rundir import write_atomic


def write_output(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (a temporary file renamed over it): on any failure the old file is
    intact and the error names the path and a fix. A new file gets the usual mode, a replaced one keeps its own."""
    if path.is_dir():
        raise MoekitError(f"-o {path}: is a directory.\n  fix: give a file path, e.g. -o {path / 'job.yaml'}")
    try:
        if path.exists() and not path.is_file():  # /dev/stdout, a pipe: written into, never replaced
            with open(path, "w", encoding="utf8") as fh:
                fh.write(text)
            return
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask()
        write_atomic(path, text)
        os.chmod(path, mode)
    except OSError as exc:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        fix = "free space there, or write elsewhere with -o" if full else "write to a folder you can write to with -o"
        raise MoekitError(
            f"-o {path}: could not write it ({exc.strerror}); "
            f"{'the existing file is unchanged' if path.exists() else 'nothing was written'}.\n  fix: {fix}"
        ) from None


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
