"""Checks that know each MoE family's routing: what MaxText 0.2.5 would refuse, or silently ignore, for it.

Listed in config.checks.CHECKS; pure like the others. The facts come from config/kinds/families.py.
"""

from __future__ import annotations

from collections.abc import Iterator

from moekit.config.checks import moe as moe_checks
from moekit.config.checks.problem import Problem
from moekit.config.kinds.families import FAMILIES, GROUP_ROUTING_MODELS, ROUTING_DEFAULTS
from moekit.config.schema import Config, Routing

ROUTING_KEYS = tuple(Routing.model_fields)


def routing_has_one_owner(cfg: Config) -> Iterator[Problem]:
    """Routing keys and decoder_block are set through the model option only, never through `model.extra` or
    `maxtext.extra`, where they would bypass the family checks."""
    for where, mapping in (("model.extra", cfg.model.extra), ("maxtext.extra", cfg.maxtext.extra)):
        for key in ROUTING_KEYS + ("decoder_block",):
            if key in mapping:
                yield Problem(
                    f"{where}.{key}",
                    f"{key} is a routing key that model option sets (model.routing / model.decoder_block); set here "
                    "it would bypass moekit's family checks",
                    f"model.routing.{key}={mapping[key]}"
                    if key != "decoder_block"
                    else f"model.decoder_block={mapping[key]}",
                )


def decoder_reads_the_routing(cfg: Config) -> Iterator[Problem]:
    """A routing value the family's decoder never reads would be ignored without a word."""
    m, fam = cfg.model, FAMILIES[cfg.model.decoder_block]
    for key, value in m.routing.model_dump().items():
        if value != ROUTING_DEFAULTS[key] and key not in fam.reads:
            yield Problem(
                f"model.routing.{key}",
                f"{key}={value!r}: MaxText's {m.decoder_block} decoder does not read it (its model files: "
                f"{fam.models}), so it would be ignored",
                f"model.routing.{key}={ROUTING_DEFAULTS[key]!r}, or a model of a family that has it",
            )
    if m.first_dense_layers and not fam.leading_dense:
        yield Problem(
            "model.first_dense_layers",
            f"first_dense_layers={m.first_dense_layers}: only "
            + ", ".join(f"the {f.decoder_block}" for f in FAMILIES.values() if f.leading_dense)
            + f" decoder has leading dense layers; MaxText's {m.decoder_block} decoder ignores it"
            + (f" ({fam.dense_layers})" if fam.dense_layers else ""),
            "model.first_dense_layers=0",
        )


def layers_fit_the_family(cfg: Config) -> Iterator[Problem]:
    """The layers are whole cycles of the family's pattern, leave at least one MoE layer, and top-k is within what
    the decoder accepts."""
    m, fam = cfg.model, FAMILIES[cfg.model.decoder_block]
    cycle = max(fam.layer_cycle, m.routing.interleave_moe_layer_step)
    if m.num_layers % cycle:
        yield Problem(
            "model.num_layers",
            f"num_layers={m.num_layers} is not a multiple of {cycle}: MaxText's {m.decoder_block} decoder builds its "
            f"layers in cycles of {cycle} (attention pattern / MoE interleave) and would drop the remainder",
            f"model.num_layers={max(cycle, m.num_layers - m.num_layers % cycle)}",
        )
    moe_layers = (m.num_layers - m.first_dense_layers) // m.routing.interleave_moe_layer_step
    if moe_layers < 1:
        yield Problem(
            "model.num_layers",
            f"{m.num_layers} layers with interleave_moe_layer_step={m.routing.interleave_moe_layer_step} leave no MoE "
            "layer",
            f"model.num_layers={m.routing.interleave_moe_layer_step}",
        )
    if fam.max_top_k and m.experts_per_token > fam.max_top_k:
        yield Problem(
            "model.experts_per_token",
            f"experts_per_token={m.experts_per_token}: MaxText's {m.decoder_block} decoder supports "
            f"top-{fam.max_top_k} routing only (it refuses more)",
            f"model.experts_per_token={fam.max_top_k}",
        )


def group_limited_routing(cfg: Config) -> Iterator[Problem]:
    """Group-limited routing has both settings, equal groups that hold top-k, and a model (or moe=te) that runs it."""
    m = cfg.model
    groups, top = m.routing.n_routing_groups, m.routing.topk_routing_group
    if groups == -1 and top == -1:
        return
    if groups <= 0 or top <= 0:
        yield Problem(
            "model.routing.n_routing_groups",
            f"group-limited routing needs both n_routing_groups and topk_routing_group > 0 (got {groups} and {top})",
            "set both (DeepSeek-V3's own: 8 and 4), or both to -1 (off)",
        )
        return
    if m.num_experts % groups:
        yield Problem(
            "model.routing.n_routing_groups",
            f"{m.num_experts} experts do not split into {groups} equal groups (MaxText reshapes the router scores "
            "into groups and fails at trace time)",
            "choose n_routing_groups that divides model.num_experts",
        )
        return
    if top > groups:
        yield Problem(
            "model.routing.topk_routing_group",
            f"topk_routing_group={top} picks more groups than there are ({groups})",
            f"model.routing.topk_routing_group={groups // 2 or 1}",
        )
    elif m.experts_per_token > top * (m.num_experts // groups):
        yield Problem(
            "model.experts_per_token",
            f"top-{m.experts_per_token} cannot be found in {top} groups of {m.num_experts // groups} experts",
            "raise model.routing.topk_routing_group or lower model.experts_per_token",
        )
    if not cfg.backend.te_block and not m.name.startswith(GROUP_ROUTING_MODELS):
        yield Problem(
            "model.routing.n_routing_groups",
            f"MaxText runs group-limited routing only for {', '.join(GROUP_ROUTING_MODELS)}* models (or inside the "
            f"TE MoE block); for model {m.name} with moe={cfg.moe.backend} it would be ignored",
            "model.routing.n_routing_groups=-1 model.routing.topk_routing_group=-1, or moe=te",
        )


def backend_supports_family(cfg: Config) -> Iterator[Problem]:
    """moe=te runs the family and its routing options, and token dropping is off where MaxText refuses it for the
    family."""
    m, fam, moe = cfg.model, FAMILIES[cfg.model.decoder_block], cfg.moe
    if cfg.backend.te_block:
        if fam.te_moe_block:
            yield Problem(
                "moe",
                f"moe=te with the {m.decoder_block} family: {fam.te_moe_block}",
                "moe=tokamax (the fastest other dropless path on GPU)",
            )
        elif m.routing.norm_topk_prob:
            yield Problem(
                "model.routing.norm_topk_prob",
                "MaxText's TE MoE block refuses norm_topk_prob=true",
                "model.routing.norm_topk_prob=false, or moe=tokamax",
            )
        if m.routing.routed_bias_update_rate > 0:
            yield Problem(
                "model.routing.routed_bias_update_rate",
                "MaxText's TE MoE block refuses loss-free bias updates (routed_bias_update_rate > 0)",
                "model.routing.routed_bias_update_rate=0.0, or moe=tokamax",
            )
    if fam.dropless_only:
        where, refusal = fam.dropless_only
        if (where == "always" and moe.capacity_factor >= 0) or (
            where == "dense_matmul" and not cfg.backend.sparse and moe.capacity_factor != -1
        ):
            yield Problem(
                "moe.capacity_factor",
                f"capacity_factor={moe.capacity_factor} (moe={moe.backend}) with the {m.decoder_block} family: MaxText "
                f"refuses it ({refusal})",
                f"a dropless back end with moe.capacity_factor=-1: {moe_checks.dropless_choices(cfg)}",
            )


def attention_runs_the_family(cfg: Config) -> Iterator[Problem]:
    """A family with attention sinks uses, on GPU, an attention kernel that runs them."""
    fam, attention = FAMILIES[cfg.model.decoder_block], cfg.attention_kernel
    if fam.attention_sinks and cfg.hardware.platform == "gpu" and attention not in ("cudnn_flash_te", "dot_product"):
        yield Problem(
            "model.attention",
            f"the {cfg.model.decoder_block} family's attention has learned sinks, which MaxText runs on GPU only "
            f"with attention=cudnn_flash_te or dot_product; attention={attention or 'autoselected'} raises once "
            "the model is traced",
            "model.attention=cudnn_flash_te (NGC image, TransformerEngine) or model.attention=dot_product",
        )
