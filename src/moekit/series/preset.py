"""The winner of a tuning sweep as an experiment file (effects: reads the base experiment and the run's config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from moekit.base import parse
from moekit.base.errors import MoekitError
from moekit.config.compose import CONFIG_MAX_BYTES, GROUPS, config_dir
from moekit.series import tuning


def _platform(run_dir: Path) -> str | None:
    """hardware.platform of the run the preset comes from (its config.yaml), or None when unreadable."""
    from moekit.rundir import records

    try:
        return ((records.read_config(run_dir) or {}).get("hardware") or {}).get("platform")
    except (MoekitError, AttributeError):
        return None


def preset_yaml(name: str, best: dict[str, Any]) -> str:
    """The winner as an experiment file: the base experiment's file with the winning overrides applied."""
    overrides = best["overrides"]
    experiment = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), None)
    body: dict[str, Any] = {}
    defaults: list[Any] = []
    if experiment:
        path = config_dir() / "experiment" / f"{experiment}.yaml"
        base = parse.yaml_file(path, CONFIG_MAX_BYTES, "experiment file", finite=False) or {}
        defaults = list(base.pop("defaults", []))
        body = base
    for o in overrides:
        key, _, value = o.lstrip("+").partition("=")
        if key in GROUPS and key != "experiment":
            entry = f"override /{key}"
            defaults = [d for d in defaults if not (isinstance(d, dict) and entry in d)] + [{entry: value}]
        elif key != "experiment":
            tuning.set_dotted(body, key, parse.yaml_text(value, f"override {key}", finite=False))
    v = best.get("versions") or {}
    body["experiment_name"] = name
    gpu = _platform(Path(best["run_dir"])) == "gpu" and bool(best.get("tflops_per_device"))
    body["expect"] = {
        # A CPU has no model-FLOP peak moekit measures against: only its step time is a number to expect.
        "tflops_per_gpu": round(best["tflops_per_device"], 1) if gpu else None,
        "step_time_s": round(best["step_time_s"], 3),
        "provenance": {
            "kind": "measured",
            "source": f"moekit tune on {v.get('host', '?')} ({v.get('platform', '?')}); jax {v.get('jax')}, "
            f"maxtext {v.get('maxtext')}, tokamax {v.get('tokamax')}, moekit {v.get('moekit')}; "
            f"candidate {Path(best['run_dir']).name} of the sweep",  # a folder name, never a machine's path
            "gpus": (best.get("devices") or 1) if gpu else None,
            "date": best.get("date"),
        },
    }
    changes = tuning.label([o for o in overrides if not o.startswith("experiment=")])
    header = (
        "# @package _global_\n"
        f"# The fastest configuration `moekit tune` found from experiment={experiment} ({changes}). "
        f"Run: moekit train experiment={name}\n"
    )
    return header + yaml.safe_dump({"defaults": defaults, **body}, sort_keys=False, width=110)
