"""How a config value is written as text in each place a job reads it (pure): the one value formatter.

MaxText reads every `key=value` argument as a YAML scalar, a process reads its environment as plain strings, and
XLA reads XLA_FLAGS as `--name=value` words. The three agree on booleans (`true`/`false`) and numbers (Python's
shortest round-trip text); they differ on strings and on None, and each function below says how.
"""

from __future__ import annotations

import re

import yaml

from moekit.config.schema import Scalar

# Strings that every YAML reader keeps as strings when unquoted (no number, bool or null look-alikes).
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./:@+-]*")


def _scalar(value: bool | int | float) -> str:
    """Booleans as YAML, XLA and most programs spell them; numbers as Python's shortest round-trip text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def maxtext(value: Scalar | list[str]) -> str:
    """A MaxText argument's value: read back as YAML it is the same value. Strings stay strings (`off` would become
    False, `1e3` a number): anything but a plain word is single-quoted. A list is a flow sequence of such scalars,
    so no element can add structure. None is YAML's null."""
    if isinstance(value, list):
        return "[" + ", ".join(maxtext(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, (bool, int, float)):
        return _scalar(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and yaml.safe_load(text) == text:
        return text
    return "'" + text.replace("'", "''") + "'"


def env(value: Scalar) -> str:
    """An environment variable's value: strings as they are, None as the empty string."""
    if value is None:
        return ""
    if isinstance(value, (bool, int, float)):
        return _scalar(value)
    return str(value)


def xla_flag(name: str, value: Scalar) -> str:
    """One XLA_FLAGS word, `--name=value` (config/formats.py keeps the value free of whitespace and quotes)."""
    return f"--{name}={env(value)}"
