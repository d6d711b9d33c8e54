"""The environment and command line a config gives its processes fit what the kernel passes to a program.

Linux copies a new program's arguments and environment onto its stack: one string (`NAME=value`, an argument)
holds at most MAX_ARG_STRLEN bytes, and all of them together at most ARG_MAX (a quarter of the stack limit, 2 MiB
under the usual 8 MiB). Beyond either, the launch fails with "Argument list too long" after the run directory
exists. A JobSet carries the same variables in one object, which the Kubernetes API server refuses above about
1.5 MiB (render/targets.py checks the rendered size). Pure: the limits are the kernel's and the API server's
defaults, not read from this host.
"""

from __future__ import annotations

from collections.abc import Iterator

from moekit.config.checks.problem import Problem
from moekit.config.schema import Config

MAX_ARG_STRLEN = 131072  # Linux: 32 pages of 4 KiB, one argument or environment string
ARG_MAX = 2 * 1024 * 1024  # Linux under the usual 8 MiB stack limit (getconf ARG_MAX)
# What the config may use of ARG_MAX: the rest is left to the inherited environment (PATH, the user's variables)
# and to MaxText's own arguments and XLA_FLAGS, which moekit adds.
CONFIG_SHARE = ARG_MAX // 2
ENV_SECTIONS = ("memory", "xla", "hardware", "network", "cluster")


def _strings(cfg: Config) -> Iterator[tuple[str, int]]:
    """(key, bytes on the new program's stack) for each variable and raw MaxText argument the config sets."""
    for section in ENV_SECTIONS:
        for name, value in getattr(cfg, section).env.items():
            yield f"{section}.env.{name}", len(f"{name}={value}".encode()) + 1
    for where, mapping in (("maxtext.extra", cfg.maxtext.extra), ("model.extra", cfg.model.extra)):
        for name, value in mapping.items():
            yield f"{where}.{name}", len(f"{name}={value}".encode()) + 1


def environment_fits_a_launch(cfg: Config) -> Iterator[Problem]:
    """Each variable and raw MaxText argument under MAX_ARG_STRLEN, all of them within half of ARG_MAX."""
    sizes = list(_strings(cfg))
    for key, size in sizes:
        if size > MAX_ARG_STRLEN:
            yield Problem(
                key,
                f"is {size:,} bytes; Linux passes at most {MAX_ARG_STRLEN:,} bytes per variable or argument to a "
                "program (the launch would fail with 'Argument list too long')",
                f"put the value in a file and pass its path in {key}",
            )
    total = sum(size for _, size in sizes)
    if total > CONFIG_SHARE:
        largest = sorted(sizes, key=lambda s: -s[1])[:3]
        named = ", ".join(f"{k} ({s:,} bytes)" for k, s in largest)
        yield Problem(
            "cluster.env",
            f"the config sets {len(sizes):,} variables and raw arguments of {total:,} bytes in all; a program "
            f"receives at most {ARG_MAX:,} bytes of arguments and environment together, and moekit keeps half of it "
            f"for the inherited environment and MaxText's own arguments (largest: {named})",
            "set fewer or shorter variables: put large values in files and pass their paths",
        )
