"""Read the installed MaxText's own files (base.yml, model files, shipped tokenizers) without importing it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from moekit.base import parse
from moekit.base.errors import ConfigError

MAX_BYTES = 8 << 20  # MaxText's base.yml is about 50 kB; a model file a few hundred bytes


def package_dir() -> Path:
    """The installed maxtext package folder."""
    spec = importlib.util.find_spec("maxtext")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("MaxText is not installed in this Python; moekit reads its model files (make venv)")
    return Path(next(iter(spec.submodule_search_locations)))


def model_values(model_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """MaxText's base.yml and configs/models/<model_name>.yml."""
    configs = package_dir() / "configs"
    model = configs / "models" / f"{model_name}.yml"
    if not model.is_file():
        known = ", ".join(sorted(p.stem for p in (configs / "models").glob("*.yml")))
        raise ConfigError(f"model.name={model_name} has no MaxText model file; known: {known}")
    base = parse.yaml_file(configs / "base.yml", MAX_BYTES, "MaxText config file", finite=False)
    return base, parse.yaml_file(model, MAX_BYTES, "MaxText model file", finite=False) or {}


def assets_dir() -> Path:
    """The assets folder inside the installed package (MaxText 0.2.5's wheel looks for it elsewhere)."""
    return package_dir() / "assets"


def shipped_tokenizers() -> list[str]:
    """Names of the tokenizers MaxText ships (assets/tokenizers/)."""
    folder = assets_dir() / "tokenizers"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


# transformers (imported by MaxText's tokenizer module) prints "PyTorch was not found. Models won't be available ..."
# on import: an advisory about its model classes, which MaxText's tokenizers never use.
QUIET_TRANSFORMERS = {"TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}


def tokenizer_module() -> Any:
    """MaxText's tokenizer module (maxtext.input_pipeline.tokenizer), imported without transformers' advisory notice
    on moekit's console."""
    import os

    for name, value in QUIET_TRANSFORMERS.items():
        os.environ.setdefault(name, value)
    from maxtext.input_pipeline import tokenizer

    return tokenizer
