"""Published reference numbers (src/moekit/data/published.yaml), each with its source."""

from __future__ import annotations

from importlib import resources
from typing import Any

from moekit.base import parse

REQUIRED = ("id", "source", "model", "hardware", "tflops_per_gpu")


def load() -> list[dict[str, Any]]:
    """The entries of the packaged data file; each one names its source (checked here, so none slips in bare)."""
    text = resources.files("moekit").joinpath("data/published.yaml").read_text(encoding="utf8")
    entries = parse.yaml_text(text, "published.yaml") or []
    for e in entries:
        missing = [k for k in REQUIRED if not e.get(k)]
        if missing:
            raise ValueError(f"published.yaml entry {e.get('id', '?')} lacks {missing}")
    return entries


def entry(entries: list[dict[str, Any]], entry_id: str) -> dict[str, Any]:
    """The entry with this id (KeyError names the known ones)."""
    found = [e for e in entries if e["id"] == entry_id]
    if not found:
        raise KeyError(f"no published entry {entry_id!r}; known: {', '.join(e['id'] for e in entries)}")
    return found[0]


def for_model(entries: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """The entries measured on `model` (a MaxText model name)."""
    return [e for e in entries if e["model"] == model]
