"""Check a Hugging Face checkpoint folder against the model a moekit option composes, before anything is written.

Three refusals, each naming what differs: the family (config.json's model_type against the option's decoder block),
the architecture (moekit.checkpoint.model.architecture: the first key whose value differs), the tensors (safetensors
headers against MaxText's HF_SHAPE for that config: the first tensor missing or of another shape). Pure: works on
config.json (checked by hf_config) and the headers that moekit.checkpoint.convert.files read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moekit.base.errors import MoekitError
from moekit.checkpoint.model.architecture import HF_FAMILIES, differences, from_hf, from_maxtext, model_overrides
from moekit.checkpoint.model.hf_config import bound_by_tensors
from moekit.config.kinds.families import FAMILIES

# The family rows' Hugging Face side (config/kinds/families.py HfModel): the MaxText 0.2.5 param mapping
# (PARAM_MAPPING/HOOK_FNS/HF_SHAPE key) of each model_type, or the reason there is none; the per-expert mappings.
_HF = [h for f in FAMILIES.values() for h in f.hf]
MAPPING_KEYS = {h.model_type: h.mapping for h in _HF if h.mapping}
OPTIONS = {h.model_type: h.option for h in _HF if h.option}  # model_type -> the conf/model option it imports as
NO_MAPPING = {h.model_type: h.no_mapping for h in _HF if not h.mapping}
PER_EXPERT = frozenset(h.mapping for h in _HF if h.per_expert)


class CheckpointError(MoekitError):
    """The checkpoint cannot be imported into (or exported from) this model as given."""


@dataclass(slots=True)
class HfCheckpoint:
    """A Hugging Face checkpoint folder: its config and its tensors' names, shapes and dtypes (headers only)."""

    folder: Path
    config: dict[str, Any]
    tensors: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    sources: dict[str, Path] = field(default_factory=dict)  # tensor -> the file it is read from

    @property
    def files(self) -> list[Path]:
        return sorted(set(self.sources.values()))

    @property
    def parameters(self) -> int:
        total = 0
        for shape, _ in self.tensors.values():
            n = 1
            for d in shape:
                n *= d
            total += n
        return total

    @property
    def bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)


def family_check(config: dict[str, Any], decoder_block: str, option: str) -> str:
    """The MaxText mapping key for this checkpoint, or the refusal naming the family that differs."""
    kind = config.get("model_type", "?")
    block = HF_FAMILIES.get(kind)
    if block is None:
        raise CheckpointError(f"model_type {kind!r}: moekit has no family for it (known: {', '.join(HF_FAMILIES)})")
    if block != decoder_block:
        fix = (
            f"--family {OPTIONS[kind]} (the model option for {kind}; the checkpoint's widths come from its config.json)"
            if kind in OPTIONS
            else f"--family <a conf/model option of decoder {block}>"
        )
        raise CheckpointError(
            f"family mismatch: the checkpoint is {kind} (MaxText decoder {block}); model={option} is {decoder_block}"
            f"\n  fix: {fix}"
        )
    if kind in NO_MAPPING:
        raise CheckpointError(f"{kind}: {NO_MAPPING[kind]}")
    return MAPPING_KEYS[kind]


def override_strings(config: dict[str, Any]) -> list[str]:
    """Hydra overrides (`model.key=value`) that give the option this checkpoint's shape."""
    o = model_overrides(config)
    extra = o.pop("extra")
    return [f"model.{k}={v}" for k, v in o.items()] + [f"model.extra.{k}={v}" for k, v in extra.items()]


def architecture_check(config: dict[str, Any], values: dict[str, Any]) -> None:
    """Refuse when the composed model (MaxText's resolved keys) is not the checkpoint's, naming the first key."""
    diff = differences(from_maxtext(values), from_hf(config))
    if diff:
        key, (ours, theirs) = next(iter(diff.items()))
        raise CheckpointError(
            f"architecture mismatch at {key!r}: the model composes {ours!r}, the checkpoint's config.json {theirs!r}"
            + (f" (and {len(diff) - 1} more key(s))" if len(diff) > 1 else "")
        )


def shape_check(ckpt: HfCheckpoint, mapping_key: str) -> list[str]:
    """Refuse at the first tensor MaxText's mapping needs that is missing or of another shape; returns the names
    of tensors the mapping does not read (a DeepSeek-V3 checkpoint's multi-token-prediction layer, for example)."""
    bound_by_tensors(ckpt.config, len(ckpt.tensors), mapping_key in PER_EXPERT, str(ckpt.folder / "config.json"))
    from maxtext.checkpoint_conversion.utils.hf_shape import HF_SHAPE

    expected = HF_SHAPE[mapping_key](ckpt.config)
    for name, shape in expected.items():
        if name not in ckpt.tensors:
            if name.endswith("e_score_correction_bias") and ckpt.config.get("model_type") != "deepseek_v3":
                continue
            raise CheckpointError(f"tensor {name}: missing from {ckpt.folder} (expected shape {tuple(shape)})")
        got = ckpt.tensors[name][0]
        if tuple(got) != tuple(shape):
            raise CheckpointError(f"tensor {name}: shape {got} in the checkpoint, the model needs {tuple(shape)}")
    return sorted(set(ckpt.tensors) - set(expected))
