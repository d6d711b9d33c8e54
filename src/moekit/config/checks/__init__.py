"""Cross-field checks of a typed config, run before anything launches.

Each check returns Problems (key, what is wrong, the override that fixes it); `problems` runs all of
them so a user sees every problem at once. Pure: no environment, files or clock. The checks live in one
module per topic (mesh, moe, cluster, compute, text, sizes, family, data, checkpoint, known_issues: failures
reported on real clusters, docs/known-issues.md); REGISTRY (each check with
the jobs it judges, the one list CHECKS and TRAINING_ONLY are read from) and WARNINGS list them here.
"""

from __future__ import annotations

from typing import Final, Literal

from moekit.base.errors import ConfigError
from moekit.config.checks import (
    checkpoint,
    cluster,
    compute,
    data,
    family,
    known_issues,
    maxtext_view,
    mesh,
    moe,
    sizes,
    text,
)
from moekit.config.checks.problem import Check, Problem
from moekit.config.schema import Config

__all__ = [
    "CHECKS",
    "REGISTRY",
    "TRAINING_ONLY",
    "WARNINGS",
    "Check",
    "Problem",
    "ensure_valid",
    "format_warnings",
    "problems",
    "warnings",
]

# Every check, in the order its problems print, with the jobs it judges: EVERY_JOB, or TRAINING (the model, its MoE
# layer, precision, memory, data, the batch), which a fabric-only job (`moekit fabric`, fabric.only=true) skips: it
# runs the rendezvous and the collectives of the mesh, never MaxText. A topic module holds the checks of one concern.
EVERY_JOB: Final = "every job"
TRAINING: Final = "training"
REGISTRY: list[tuple[Check, Literal["every job", "training"]]] = [
    (mesh.mesh_matches_devices, EVERY_JOB),
    (mesh.processes_fit_devices, EVERY_JOB),
    (cluster.local_is_one_host, EVERY_JOB),
    (mesh.experts_divide_over_ep, TRAINING),
    (mesh.batch_divides, TRAINING),
    (moe.dropless, TRAINING),
    (moe.backend_runs_here, TRAINING),
    (moe.megablox_on_gpu, TRAINING),
    (moe.tokamax_gpu_takes_half_precision, TRAINING),
    (compute.precision_supported, TRAINING),
    (compute.quantized_router_fits, TRAINING),
    (moe.te_moe_requirements, TRAINING),
    (moe.te_gmm_requirements, TRAINING),
    (moe.dispatch_fits_backend, TRAINING),
    (maxtext_view.backend_keys, TRAINING),
    (compute.memory_policy_consistent, TRAINING),
    (compute.attention_supported, TRAINING),
    (compute.profile_window_fits, TRAINING),
    (cluster.job_names, EVERY_JOB),
    (text.text_fits_its_format, EVERY_JOB),
    (cluster.volumes_valid, EVERY_JOB),
    (cluster.checkpoints_persist, EVERY_JOB),
    (text.paths_fit_the_file_system, EVERY_JOB),
    (sizes.environment_fits_a_launch, EVERY_JOB),
    (cluster.no_inline_secrets, EVERY_JOB),
    (data.data_source_complete, TRAINING),
    (data.segments_with_te_attention, TRAINING),
    (family.routing_has_one_owner, TRAINING),
    (family.decoder_reads_the_routing, TRAINING),
    (family.layers_fit_the_family, TRAINING),
    (family.group_limited_routing, TRAINING),
    (family.backend_supports_family, TRAINING),
    (family.attention_runs_the_family, TRAINING),
    (checkpoint.init_from_names_the_import, TRAINING),
]
CHECKS: list[Check] = [fn for fn, _ in REGISTRY]
TRAINING_ONLY: frozenset[Check] = frozenset(fn for fn, runs in REGISTRY if runs == TRAINING)

# What runs, but not as the user likely means (slow, not refused); printed before launch.
WARNINGS: list[Check] = [
    compute.custom_policy_names_both_tags,
    mesh.ici_within_nvlink_domain,
    cluster.network_fits_the_layout,
    cluster.keys_of_another_kind,
    data.segments_with_jax_cudnn_attention,
    known_issues.spcx_plugin_at_high_ep,
    known_issues.ep_group_within_one_nvlink_domain,
    known_issues.cpu_binding_for_tp_ep,
]


def problems(cfg: Config) -> list[Problem]:
    """Every check's problems, in registration order; empty for a valid config. Numbers out of range (inf, nan,
    beyond 64 bits) come alone: the other checks compute with them."""
    if found := list(text.numbers_in_range(cfg)):
        return found
    seen, origins, wrong = maxtext_view.effective(cfg)  # what MaxText receives: escape hatches merged in
    if wrong:
        return wrong
    checks = [fn for fn in CHECKS if not (cfg.fabric.only and fn in TRAINING_ONLY)]
    return [maxtext_view.attributed(p, origins) for fn in checks for p in fn(seen)]


def warnings(cfg: Config) -> list[Problem]:
    """What runs, but probably not as meant; each with its fix. Callers print them before launching."""
    seen, origins, wrong = maxtext_view.effective(cfg)
    return [] if wrong else [maxtext_view.attributed(p, origins) for fn in WARNINGS for p in fn(seen)]


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
