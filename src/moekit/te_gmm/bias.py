"""Per-row expert biases with a gradient that is a matmul, not a scatter (families with `mlp_bias`: gpt-oss).

MaxText 0.2.5's sparse path gives each routed row its expert's bias with `bias[experts_index]`
(`RoutedMoE.transform_bias`): a gather of tokens x top-k rows from a table of a few expert rows. Its gradient
is the transposed gather, a scatter-add of every row into those few expert rows. On a GPU that scatter is a
storm of colliding atomic adds on one small table, once per bias (wi_0, wi_1, wo) and layer, forward and
recomputation aside. The same sum is one small matmul: one_hot(experts_index)^T @ gradient, accumulated in
float32. The forward stays the gather; only the gradient's arithmetic changes (the order of a float sum).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

SCOPE = "moekit_expert_bias"  # named scope: profiles find the bias rows and their gradient by it
CALL = "moekit te_gmm: expert bias rows"  # one line per traced call (printed while compiling)


@jax.custom_vjp
def expert_rows(bias: jax.Array, experts_index: jax.Array) -> jax.Array:
    """bias[experts_index]: bias [E, ...] and integer experts_index [M] -> [M, ...]."""
    return bias[experts_index]


def _forward(bias, experts_index):
    return bias[experts_index], (experts_index, bias)  # the table is small (experts x width)


def _backward(saved, grad):
    experts_index, table = saved
    experts, dtype = table.shape[0], table.dtype
    with jax.named_scope(SCOPE):
        # Rows whose index is outside [0, E) get an all-zero one-hot row: they add nothing (a scatter drops them).
        onehot = jax.nn.one_hot(experts_index, experts, dtype=grad.dtype)
        flat = grad.reshape(grad.shape[0], -1)
        summed = jnp.einsum("me,mf->ef", onehot, flat, preferred_element_type=jnp.float32)
        grad_bias = summed.reshape((experts, *grad.shape[1:])).astype(dtype)
    return grad_bias, None  # integer indices have no gradient


expert_rows.defvjp(_forward, _backward)


def transform_bias(self, experts_index, *biases):  # noqa: ARG001 (a method of MaxText's RoutedMoE)
    """MaxText's RoutedMoE.transform_bias with expert_rows: the same rows, the gradient as a matmul."""
    print(f"{CALL}: {len(biases)} bias table(s) {[tuple(b.shape) for b in biases]}", flush=True)
    with jax.named_scope(SCOPE):
        return tuple(expert_rows(b, experts_index) for b in biases)
