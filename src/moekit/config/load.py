"""The one way a command gets its config: compose the overrides, check every rule, print the warnings."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from moekit.config.checks import CHECKS, Problem, ensure_valid, format_warnings, warnings
from moekit.config.compose import compose
from moekit.config.schema import Config


def load(
    overrides: Sequence[str],
    *,
    warn: bool | Callable[[Problem], bool] = True,
    phase: Callable[[str], None] | None = None,
) -> Config:
    """The config the overrides compose to, every check passed (one ConfigError lists every problem), before
    anything else runs. `warn`: print its warnings to standard error (a predicate: those it keeps); False leaves
    them to the caller (`checks.warnings`). `phase` hears what is being done (a progress line)."""
    if phase:
        phase("composing the config")
    composed = compose(overrides)
    if phase:
        phase(f"checking it ({len(CHECKS)} checks)")
    cfg = ensure_valid(composed)
    if warn:
        found = [w for w in warnings(cfg) if warn is True or warn(w)]
        if found:
            print(format_warnings(found), file=sys.stderr)
    return cfg
