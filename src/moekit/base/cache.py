"""moekit's cache of answers that cost seconds to get and depend only on installed versions (effects: files).

$MOEKIT_CACHE_DIR, else $XDG_CACHE_HOME/moekit, else ~/.cache/moekit. A cache that cannot be read or written
is treated as empty: the answer is then computed again, never guessed.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from moekit.base import parse
from moekit.base.errors import MoekitError

ENV = "MOEKIT_CACHE_DIR"
MAX_BYTES = 16 << 20  # a cached probe result is a few kB


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The cache folder: $MOEKIT_CACHE_DIR, else $XDG_CACHE_HOME/moekit, else ~/.cache/moekit."""
    env = os.environ if environ is None else environ
    if env.get(ENV):
        return Path(env[ENV])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "moekit"


def read(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The JSON stored under `name`, or None."""
    try:
        return parse.json_file(cache_dir(environ) / name, MAX_BYTES, "cache file")
    except (OSError, MoekitError):
        return None


def write(name: str, data: Any, environ: Mapping[str, str] | None = None) -> None:
    """Store `data` under `name` (atomically); a cache that cannot be written is skipped."""
    path = cache_dir(environ) / name
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
