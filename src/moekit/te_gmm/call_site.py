"""The MaxText source moe=te_gmm patches: which ones are known, and how to recognise them without importing.

The hook replaces what `maxtext.layers.moe` sees as `jax.lax.ragged_dot`. That is safe only for a moe.py whose
one ragged_dot call (in `RoutedMoE.sparse_matmul`'s `jax_ragged_dot_gmm`) was read: 2-D tokens x 3-D experts,
int32 group sizes, inputs and kernel already cast to the activation dtype, `preferred_element_type` set, no
group_offset, rows past the routed tokens (tile padding, the expert-parallel receive buffer) expected to come
back as zeros. A file hash pins exactly that source.
"""

from __future__ import annotations

import hashlib
import importlib.util
from importlib import metadata
from pathlib import Path

# sha256 of maxtext/layers/moe.py -> the MaxText release it ships in (read for this hook).
KNOWN_MOE_SOURCES: dict[str, str] = {
    "403b86fe8d6857d9f622d488ad7e68ba4eb8090288c20af3c84e908e90e37fa8": "0.2.5",
}
RELATIVE_PATH = Path("layers") / "moe.py"


FIX = "pip install maxtext==0.2.5 (the MaxText moe=te_gmm knows), or use moe=tokamax or moe=te"


def moe_source() -> Path | None:
    """maxtext/layers/moe.py of the installed MaxText, found without importing MaxText (None if absent)."""
    spec = importlib.util.find_spec("maxtext")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / RELATIVE_PATH


def installed_version() -> str | None:
    """The installed MaxText's version, or None when MaxText is not installed."""
    try:
        return metadata.version("maxtext")
    except metadata.PackageNotFoundError:
        return None


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes: what pins a known moe.py."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def problem(path: Path | None, version: str | None) -> str | None:
    """Why moe=te_gmm must not patch this MaxText (None: it is a known source)."""
    known = ", ".join(f"MaxText {v} (moe.py sha256 {h[:12]}...)" for h, v in KNOWN_MOE_SOURCES.items())
    if path is None or not path.is_file():
        return f"MaxText is not installed here (no maxtext/{RELATIVE_PATH}); moe=te_gmm knows {known}"
    digest = sha256(path)
    release = KNOWN_MOE_SOURCES.get(digest)
    if release is None:
        return (
            f"MaxText {version or '(unknown version)'} at {path} has a moe.py (sha256 {digest[:12]}...) that "
            f"moe=te_gmm was not written against; it knows {known}, whose one jax.lax.ragged_dot call it hands to TE"
        )
    if version is not None and version != release:
        return f"MaxText reports version {version} but its moe.py is MaxText {release}'s: a mixed installation"
    return None
