"""Stop before training when the MaxText in this image does not know a key that moekit will pass it.

An older base image ships an older MaxText, which rejects unknown keys only after JAX has started (and,
on a cluster, after every pod has pulled the image). This names all the missing keys at once and says
how to fix it. Usage: check_maxtext_keys.py [train overrides ...]; exit 0 when MaxText knows them all.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

MISSING_EXIT = 3


def maxtext_keys() -> tuple[set[str], str]:
    """Every key MaxText's config accepts, and a description of that MaxText (version, location)."""
    try:
        import maxtext
    except ImportError:
        return set(), ""
    try:
        version = metadata.version("maxtext")
    except metadata.PackageNotFoundError:
        version = "unknown version"
    where = f"MaxText {version} at {Path(maxtext.__file__).parent}"
    try:
        from maxtext.configs import types
    except ImportError:  # releases before the pydantic schema: base.yml lists every key
        import yaml

        base = Path(maxtext.__file__).parent / "configs" / "base.yml"
        return set(yaml.safe_load(base.read_text())), where
    keys: set[str] = set()
    todo = [types.MaxTextConfig]
    while todo:  # nested sections count too, as in MaxText's own unknown-key check
        for name, field in todo.pop().model_fields.items():
            keys.add(name)
            if hasattr(field.annotation, "model_fields"):
                todo.append(field.annotation)
    return keys, where


def moekit_keys(overrides: list[str]) -> dict[str, str] | None:
    """The MaxText keys `moekit train OVERRIDES` passes, each with the config choice that set it; None when
    the config itself is invalid."""
    from moekit.base.errors import MoekitError
    from moekit.config.compose import compose
    from moekit.translate.maxtext_args import maxtext_args

    try:
        cfg = compose(overrides)
    except MoekitError:
        return None  # moekit train explains config errors itself
    return {a.key: a.origin for a in maxtext_args(cfg, "/run", "/run/metrics.jsonl")}


def main(argv: list[str]) -> int:
    wanted = moekit_keys([a for a in argv if not a.startswith("-")])
    if wanted is None:
        return 0
    known, where = maxtext_keys()
    if not where:
        print(
            "moekit: error: this image has no MaxText (import maxtext failed).\n"
            "  fix: build on NVIDIA's JAX + MaxText image: docker build --build-arg "
            "BASE_IMAGE=ghcr.io/nvidia/jax:maxtext-2026-09-10 -t moekit .",
            file=sys.stderr,
        )
        return MISSING_EXIT
    missing = [k for k in wanted if k not in known]
    extra = [k for k in missing if wanted[k] == "maxtext.extra"]
    own = [f"{k} (from {wanted[k]})" for k in missing if k not in extra]
    if own:
        print(
            f"moekit: error: {where} does not know {len(own)} key(s) that moekit passes: {', '.join(own)}\n"
            "  The base image is too old for this moekit.\n"
            "  fix: rebuild on a newer base, e.g. docker build --build-arg "
            "BASE_IMAGE=ghcr.io/nvidia/jax:maxtext-2026-09-10 -t moekit . (the blog needs 2026-09-10 or newer)",
            file=sys.stderr,
        )
    if extra:
        print(
            f"moekit: error: {where} does not know maxtext.extra key(s): {', '.join(extra)}\n"
            "  fix: correct the spelling or drop them (valid keys: MaxText's configs/base.yml)",
            file=sys.stderr,
        )
    return MISSING_EXIT if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
