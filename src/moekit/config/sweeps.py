"""Sweep expansion, one grammar for every sweep: Hydra's override grammar (`moe=dense,ragged_dot`,
`train.seq_len=range(128,513,128)`, `moe=glob(*)`, `choice(...)`), expanded to the cartesian product in the
order given, as Hydra's basic sweeper does. Used by `moekit train -m`, `moekit tune --axis` and
benchmarks/run_presets.py.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from moekit.base import quantities
from moekit.base.errors import ConfigError
from moekit.config.compose import group_options


class _GroupOptions:
    """What Hydra's glob() asks of a config loader: the options of a config group (conf/<group>/*.yaml)."""

    def get_group_options(self, group_name: str, results_filter=None, config_name=None, overrides=None) -> list[str]:
        return group_options(group_name)


def _text(value) -> str:
    """A swept value as override text; booleans as Hydra spells them (str(True) would be 'True')."""
    from hydra.core.override_parser.types import Transformer

    return ("true" if value else "false") if isinstance(value, bool) else Transformer.str(value)


def expand(overrides: Sequence[str]) -> list[list[str]]:
    """The override list of every run in the sweep (cartesian product of the sweeps, keys in given order)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create(config_loader=_GroupOptions()).parse_overrides(list(overrides))
        _refuse_too_many(parsed)
        axes: dict[str, list[str]] = {}
        for o in parsed:
            key = o.get_key_element()
            if key in axes:
                raise ConfigError(f"{key} is given twice in a multirun; give one value list (a=1,2).")
            if o.is_sweep_override():
                if not o.is_discrete_sweep():
                    raise ConfigError(f"{key}: interval() sweeps need a search sweeper; list values (a=1,2) instead.")
                axes[key] = [f"{key}={_text(v)}" for v in o.sweep_iterator()]
            else:
                axes[key] = [f"{key}={o.get_value_element_as_str()}"]
    except HydraException as exc:
        raise ConfigError(f"could not parse the multirun overrides: {str(exc).splitlines()[0]}") from None
    if any(not values for values in axes.values()):
        empty = [k for k, v in axes.items() if not v]
        raise ConfigError(f"the sweep over {', '.join(empty)} matches no option; check the glob() pattern.")
    return [list(combo) for combo in itertools.product(*axes.values())]


def _axis_size(override) -> int:
    """How many values one parsed override stands for, counted without listing them (a range of a billion is one
    subtraction); a glob() lists files of one folder, which are few."""
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    value = override.value()
    if not override.is_sweep_override():
        return 1
    if not override.is_discrete_sweep():  # interval(): a search space, not a list of runs
        raise ConfigError(
            f"{override.get_key_element()}: interval() sweeps need a search sweeper; list values (a=1,2) instead."
        )
    if isinstance(value, RangeSweep):
        if not value.step:
            raise ConfigError(f"{override.get_key_element()}: range() with step 0 never ends; give a step.")
        return max(math.ceil((value.stop - value.start) / value.step), 0)
    if isinstance(value, ChoiceSweep):
        return len(value.list)
    return len(list(override.sweep_iterator()))


def _refuse_too_many(parsed) -> None:
    """Count the runs a multirun names before any is listed: a product of ranges can name billions."""
    sizes = {o.get_key_element(): _axis_size(o) for o in parsed}
    runs = math.prod(sizes.values())
    if why := quantities.problem("sweep_runs", runs) if runs else None:
        axes = ", ".join(f"{k} ({n:,})" for k, n in sizes.items() if n > 1)
        raise ConfigError(
            f"the multirun names {runs:,} runs ({axes}): {why}.\n"
            "  fix: sweep fewer values (range(a,b,step) with a larger step, or fewer axes at once)"
        )


def is_sweep(overrides: Sequence[str]) -> bool:
    """Whether the overrides name more than one run."""
    return len(expand(overrides)) > 1
