"""Cross-field checks of a typed config, run before anything launches.

Each check returns Problems (key, what is wrong, the override that fixes it); `problems` runs all of
them so a user sees every problem at once. Pure: no environment, files or clock. The checks live in one
module per topic (mesh, moe, cluster, compute, text, sizes, family, data, checkpoint); CHECKS and WARNINGS list
them here.
"""

from __future__ import annotations

from moekit.base.errors import ConfigError
from moekit.config.checks import checkpoint, cluster, compute, data, family, mesh, moe, sizes, text
from moekit.config.checks.problem import Check, Problem
from moekit.config.schema import Config

__all__ = [
    "CHECKS",
    "TRAINING_ONLY",
    "WARNINGS",
    "Check",
    "Problem",
    "ensure_valid",
    "format_warnings",
    "problems",
    "warnings",
]

# Every check, in the order its problems print; a topic module holds the checks of one concern.
CHECKS: list[Check] = [
    mesh.mesh_matches_devices,
    mesh.processes_fit_devices,
    cluster.local_is_one_host,
    mesh.experts_divide_over_ep,
    mesh.batch_divides,
    moe.dropless,
    moe.megablox_on_gpu,
    moe.tokamax_gpu_takes_half_precision,
    compute.precision_supported,
    compute.quantized_router_fits,
    moe.te_moe_requirements,
    moe.te_gmm_requirements,
    moe.dispatch_fits_backend,
    compute.memory_policy_consistent,
    compute.attention_supported,
    compute.profile_window_fits,
    cluster.job_names,
    text.text_fits_its_format,
    cluster.volumes_valid,
    cluster.checkpoints_persist,
    text.paths_fit_the_file_system,
    sizes.environment_fits_a_launch,
    cluster.no_inline_secrets,
    data.data_source_complete,
    data.segments_with_te_attention,
    family.routing_has_one_owner,
    family.decoder_reads_the_routing,
    family.layers_fit_the_family,
    family.group_limited_routing,
    family.backend_supports_family,
    family.attention_runs_the_family,
    checkpoint.init_from_names_the_import,
]
# Checks of what training runs (the model, its MoE layer, precision, memory, data, the batch): a fabric-only job
# (`moekit fabric`, fabric.only=true) runs the rendezvous and the collectives of the mesh, never MaxText, so none of
# them apply to it.
TRAINING_ONLY: frozenset[Check] = frozenset(
    {
        mesh.experts_divide_over_ep,
        mesh.batch_divides,
        moe.dropless,
        moe.megablox_on_gpu,
        moe.tokamax_gpu_takes_half_precision,
        compute.precision_supported,
        compute.quantized_router_fits,
        moe.te_moe_requirements,
        moe.te_gmm_requirements,
        moe.dispatch_fits_backend,
        compute.memory_policy_consistent,
        compute.attention_supported,
        compute.profile_window_fits,
        data.data_source_complete,
        data.segments_with_te_attention,
        family.routing_has_one_owner,
        family.decoder_reads_the_routing,
        family.layers_fit_the_family,
        family.group_limited_routing,
        family.backend_supports_family,
        family.attention_runs_the_family,
        checkpoint.init_from_names_the_import,
    }
)
# What runs, but not as the user likely means (slow, not refused); printed before launch.
WARNINGS: list[Check] = [
    compute.custom_policy_names_both_tags,
    mesh.ici_within_nvlink_domain,
    cluster.network_fits_the_layout,
    cluster.keys_of_another_kind,
]


def problems(cfg: Config) -> list[Problem]:
    """Every check's problems, in registration order; empty for a valid config. Numbers out of range (inf, nan,
    beyond 64 bits) come alone: the other checks compute with them."""
    if found := list(text.numbers_in_range(cfg)):
        return found
    return [p for fn in CHECKS if not (cfg.fabric.only and fn in TRAINING_ONLY) for p in fn(cfg)]


def warnings(cfg: Config) -> list[Problem]:
    """What runs, but probably not as meant; each with its fix. Callers print them before launching."""
    return [p for fn in WARNINGS for p in fn(cfg)]


def format_warnings(found: list[Problem]) -> str:
    """One `moekit: warning:` line (and its fix) per warning."""
    return "\n".join(f"moekit: warning: {p}" for p in found)


def ensure_valid(cfg: Config) -> Config:
    """Raise one ConfigError listing every problem, or return the config unchanged."""
    found = problems(cfg)
    if found:
        body = "\n".join(f"  - {p}" for p in found)
        raise ConfigError(f"{len(found)} configuration problem(s); nothing was launched:\n{body}")
    return cfg
