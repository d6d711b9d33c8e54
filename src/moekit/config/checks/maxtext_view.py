"""What MaxText receives, as the checks judge it: moekit's keys with the escape hatches merged in.

MaxText takes the last value of a key, and moekit's translation writes `model.extra` after the model's keys and
`maxtext.extra` last (translate/maxtext_args.py). A key a check judges could therefore reach MaxText from an escape
hatch, past the check. FIELDS names, for every MaxText key moekit translates one-to-one from a key of its own, that
key; `effective(cfg)` is the config with each of them taken from the escape hatch that sets it, and the checks run on
it (config.checks.problems), so any check, present or future, judges what MaxText runs. A key the chosen back end
pins (config/kinds/backends.py `maxtext`) is the back end's: an escape hatch may not change it (`backend_keys`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from moekit.config.checks.problem import Problem
from moekit.config.kinds import attention
from moekit.config.schema import Config

# MaxText key -> the moekit key it is translated from, one-to-one (translate/maxtext_args.py, translate/data_keys.py).
FIELDS: dict[str, str] = {
    "base_num_decoder_layers": "model.num_layers",
    "first_num_dense_layers": "model.first_dense_layers",
    "num_experts": "model.num_experts",
    "num_experts_per_tok": "model.experts_per_token",
    "attention": "model.attention",
    "steps": "train.steps",
    "per_device_batch_size": "train.per_device_batch_size",
    "max_target_length": "train.seq_len",
    "learning_rate": "train.learning_rate",
    "warmup_steps_fraction": "train.warmup_steps_fraction",
    "dataset_type": "data.dataset_type",
    "max_segments_per_seq": "data.max_segments_per_seq",
    "packing": "data.packing",
    "num_epoch": "data.epochs",
    "grain_worker_count": "data.workers",
    "tokenizer_path": "data.tokenizer",
    "enable_data_shuffling": "data.shuffle",
    "capacity_factor": "moe.capacity_factor",
    "ragged_buffer_factor": "moe.ragged_buffer_factor",
    "checkpoint_period": "checkpoint.every",
    **{
        f"{level}_{axis}_parallelism": f"parallelism.{level}.{axis}"
        for level in ("ici", "dcn")
        for axis in ("data", "fsdp", "tensor", "expert")
    },
}
HATCHES = ("model.extra", "maxtext.extra")  # in the order translation writes them: the later wins


def from_hatches(cfg: Config) -> dict[str, tuple[str, Any]]:
    """moekit key -> (the escape-hatch key that sets it for MaxText, its value), for the keys in FIELDS."""
    found: dict[str, tuple[str, Any]] = {}
    for hatch, mapping in zip(HATCHES, (cfg.model.extra, cfg.maxtext.extra), strict=True):
        for key, value in mapping.items():
            if key in FIELDS:
                found[FIELDS[key]] = (f"{hatch}.{key}", value)
    return found


def effective(cfg: Config) -> tuple[Config, dict[str, str], list[Problem]]:
    """(the config MaxText effectively runs, moekit key -> the escape-hatch key that set it, problems of values that
    are not of their moekit key's kind). Without escape-hatch keys in FIELDS: (cfg, {}, [])."""
    found = from_hatches(cfg)
    if not found:
        return cfg, {}, []
    data = cfg.model_dump()
    for path, (_, value) in found.items():
        if path == "model.attention" and cfg.model.attention in attention.KERNELS:
            continue  # moekit's own kernel hands MaxText its carrier: a hatch naming another is refused on its own
        *parents, leaf = path.split(".")
        node = data
        for p in parents:
            node = node[p]
        node[leaf] = value
    try:
        return Config.model_validate(data), {p: h for p, (h, _) in found.items()}, []
    except ValidationError as exc:
        wrong = []
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "int", "float", "str")))
            hatch = next((h for p, (h, _) in found.items() if path.startswith(p) or p.startswith(path)), None)
            if hatch is None:
                continue
            value = found[next(p for p, (h, _) in found.items() if h == hatch)][1]
            wrong.append(
                Problem(
                    hatch,
                    f"{value!r} reaches MaxText as {hatch.rsplit('.', 1)[1]}, which moekit sets from "
                    f"{FIELDS[hatch.rsplit('.', 1)[1]]}: {err['msg']}",
                    f"drop {hatch} and set {FIELDS[hatch.rsplit('.', 1)[1]]} to a valid value",
                )
            )
        return (
            cfg,
            {},
            list(dict.fromkeys(wrong))
            or [Problem("maxtext.extra", str(exc).splitlines()[0], "drop the escape-hatch keys listed in FIELDS")],
        )


def attributed(problem: Problem, origins: dict[str, str]) -> Problem:
    """A problem of the effective config named after the escape-hatch key that set the value it judges, if any."""
    hatch = origins.get(problem.key)
    if hatch is None:
        return problem
    return Problem(
        hatch,
        f"{problem.what} (set through {hatch})",
        f"drop {hatch}; " + (problem.fix or f"set {problem.key} instead"),
    )


def backend_keys(cfg: Config) -> Iterator[Problem]:
    """A MaxText key the chosen back end pins (sparse_matmul, megablox, ...) is the back end's: an escape hatch that
    set it otherwise would run another back end than the one moekit checked."""
    pinned = cfg.backend.maxtext
    for hatch, mapping in zip(HATCHES, (cfg.model.extra, cfg.maxtext.extra), strict=True):
        for key, value in mapping.items():
            if key in pinned and value != pinned[key] and key not in cfg.backend.pinned:  # pinned: its own check
                yield Problem(
                    f"{hatch}.{key}",
                    f"{key}={value!r}: moe={cfg.moe.backend} sets {key}={pinned[key]!r}; set here it would run "
                    "another MoE back end than the one moekit checked",
                    f"drop {hatch}.{key}, and choose the back end with moe= (moekit config groups)",
                )
