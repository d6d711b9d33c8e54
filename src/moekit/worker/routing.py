"""Inside a training process: record how many tokens each expert of each MoE layer received, at sampled steps
(observe/runs/routing.py describes the file and reads it).

Balanced benchmarks hide the routing load; a run with learned routing has its own. MaxText 0.2.5 computes each
MoE layer's routing (RoutedMoE.get_topk) inside its back end's code, and for the sparse paths inside a
shard_map, where nothing can be sown. So each MoE layer's `sparse_matmul` / `dense_matmul` is wrapped: from the
gate logits it is handed (global arrays, outside any shard_map) the wrapper takes the layer's own top-k choice
once more (the same function, gradient stopped: its weights are unused and dropped by XLA), counts the tokens per
expert and sows the counts as an NNX intermediate, the way MaxText sows its own MoE diagnostics
(moe_has_overflow, moe_max_load_ratio). MaxText's loss function finishes its intermediates in
moe.finalize_deferred_intermediates; the wrapper there gathers the counts of every MoE layer ([layers, experts])
and hands them to the host through `jax.debug.callback` inside a `lax.cond` on the step (taken from the train
step's state), so an unsampled step runs no callback and moves nothing to the host; a sampled one moves layers x
experts integers. Only the counting itself (a top-k and a scatter-add of int32 per layer) runs on every step.

What this leaves out: moe=te (TransformerEngine's MoE block routes inside its own kernel: nothing to wrap) and
random routing (its top-k draws from the model's RNG stream; drawing again would change training).
"""

from __future__ import annotations

import re
import time
from typing import Any

from moekit.observe.runs import routing as rt
from moekit.worker.appender import Appender

SOWN = "moekit_expert_counts"  # the intermediate each MoE layer sows: tokens per expert, int32 [experts]
_file: Appender | None = None
_every = 0
_step: Any = None  # the traced step of the train step being traced (set while train_step traces)


def install(environ: dict[str, str]) -> bool:
    """Wrap MaxText's MoE layers, the train step's signature and the loss function's last look at its
    intermediates when the launcher names a routing file (MOEKIT_ROUTING) and a sampling interval
    (MOEKIT_ROUTING_EVERY > 0); True when installed."""
    global _file, _every
    path, every = environ.get(rt.ENV), environ.get(rt.EVERY_ENV, "0")
    if not path or not every.isdigit() or int(every) <= 0:
        return False
    try:
        from maxtext.layers import moe
        from maxtext.utils import maxtext_utils
    except ImportError:  # another trainer or MaxText version: nothing recorded, training unchanged
        return False
    if not all(hasattr(moe, n) for n in ("RoutedMoE", "finalize_deferred_intermediates")):
        return False
    _every = int(every)
    _file = Appender(path)
    _wrap_layers(moe.RoutedMoE)
    _wrap_train_signature(maxtext_utils)
    _wrap_finalize(moe, maxtext_utils.collect_intermediates_by_suffix)
    return True


def _counts(layer: Any, gate_logits: Any, pre_bias_logits: Any, input_ids: Any, forced: Any) -> Any:
    """Tokens per expert of one MoE layer's routing, int32 [experts]: the layer's own top-k choice, counted."""
    import jax
    import jax.numpy as jnp

    stop = jax.lax.stop_gradient
    _, idx = layer.get_topk(
        stop(gate_logits),
        None if pre_bias_logits is None else stop(pre_bias_logits),
        None,
        input_ids=input_ids,
        forced_routed_experts=forced,
    )
    idx = jnp.ravel(idx).astype(jnp.int32)
    valid = (idx >= 0) & (idx < layer.num_experts)  # forced routing marks unused slots out of range
    return jnp.zeros((layer.num_experts,), jnp.int32).at[jnp.where(valid, idx, 0)].add(valid.astype(jnp.int32))


def _wrap_layers(routed: Any) -> None:
    from flax import nnx

    def wrap(name: str) -> None:
        original = getattr(routed, name)

        def matmul(self, inputs, gate_logits, pre_bias_logits, *args, **kwargs):
            if not self.config.use_random_routing:
                counts = _counts(
                    self, gate_logits, pre_bias_logits, kwargs.get("input_ids"), kwargs.get("forced_routed_experts")
                )
                self.sow(nnx.Intermediate, SOWN, counts)
            return original(self, inputs, gate_logits, pre_bias_logits, *args, **kwargs)

        setattr(routed, name, matmul)

    wrap("sparse_matmul")
    wrap("dense_matmul")


def _layer_names(intermediates: Any) -> list[tuple[str, int]]:
    """(name, layers in it) of each sown leaf, in the order jax lists the leaves: the layer's module under the
    decoder (`moe_layers` for a scanned stack, `layers_3` for one layer), the blocks inside it left out."""
    import jax

    out = []
    for path, value in jax.tree_util.tree_leaves_with_path(intermediates):
        keys = [str(k.key) for k in path if hasattr(k, "key")]
        if keys and keys[-1] == SOWN:
            inner = keys[1:-1] if keys[0] == "decoder" and len(keys) > 2 else keys[:-1]
            out.append((inner[0] if inner else "moe", 1 if value.ndim == 1 else int(value.shape[0])))
    return out


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _wrap_train_signature(maxtext_utils: Any) -> None:
    """MaxText runs its train.py as __main__ (python -m), so its own functions cannot be replaced from here; the
    train step reaches jit through maxtext_utils.get_functional_train_with_signature, which can. The wrapper keeps
    the traced step where the loss function's intermediates are finished (below)."""
    signature = maxtext_utils.get_functional_train_with_signature

    def get_functional_train_with_signature(train_step, *args, **kwargs):
        def step_kept(model, config, state_mesh_shardings, params_shardings, state, *rest, **kw):
            global _step
            _step = _state_step(state)
            try:
                return train_step(model, config, state_mesh_shardings, params_shardings, state, *rest, **kw)
            finally:
                _step = None

        return signature(step_kept, *args, **kwargs)

    maxtext_utils.get_functional_train_with_signature = get_functional_train_with_signature


def _wrap_finalize(moe: Any, collect: Any) -> None:
    """MaxText's loss function hands every intermediate of the forward pass to moe.finalize_deferred_intermediates
    (train and eval alike); while a train step traces, the counts go to the host from there."""
    finalize = moe.finalize_deferred_intermediates

    def finalize_deferred_intermediates(intermediate_outputs, config, *args, **kwargs):
        out = finalize(intermediate_outputs, config, *args, **kwargs)
        if _step is not None:  # a train step (eval steps trace without one)
            _emit_at_sampled_steps(out, collect, _step, config)
        return out

    moe.finalize_deferred_intermediates = finalize_deferred_intermediates


def _state_step(state: Any) -> Any:
    """The step counter of MaxText's train state (NNX pure state: `step`, or the optimizer's)."""
    for get in (lambda s: s["step"], lambda s: s.step, lambda s: s["optimizer"]["step"]):
        try:
            value = get(state)
        except (KeyError, AttributeError, TypeError):
            continue
        return getattr(value, "value", value)
    return None


def _emit_at_sampled_steps(intermediates: Any, collect: Any, step: Any, config: Any) -> None:
    import jax
    import jax.numpy as jnp

    leaves = collect(intermediates, SOWN, ravel=False)
    if not leaves:
        return
    names = _layer_names(intermediates)
    rows = [jnp.reshape(v, (-1, v.shape[-1])) for v in leaves]
    layers = [f"{n}[{i}]" if k > 1 else n for n, k in names for i in range(k)]
    order = sorted(range(len(layers)), key=lambda i: _natural(layers[i]))
    counts = jnp.concatenate(rows)[jnp.asarray(order)]
    names_sorted = [layers[i] for i in order]
    ep = int(getattr(config, "ici_expert_parallelism", 1) or 1) * int(getattr(config, "dcn_expert_parallelism", 1) or 1)
    step = jnp.asarray(step, jnp.int32)

    def record(s: Any, c: Any) -> None:
        _write({"step": int(s), "t": time.time(), "ep": ep, "layers": names_sorted, "counts": c.tolist()})

    jax.lax.cond(
        step % _every == 0,
        lambda s, c: jax.debug.callback(record, s, c),
        lambda s, c: None,
        step,
        counts,
    )


def _write(record: dict[str, Any]) -> None:
    if _file is not None:
        _file.write(record)
