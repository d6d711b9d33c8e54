"""Token dispatch/combine microbenchmark on one device: the permutation around the expert GEMMs.

Dispatch: router top-k, a stable sort of token copies by expert, the gather into expert order and the
group sizes. Combine: the weighted return of expert outputs to token order, two ways: scatter-add (what the
transpose of a plain gather gives) and gather by the inverse permutation (an argsort of the sort order), then a
weighted sum over top-k. The second is what MaxText 0.2.5's sparse path does (moe.py `unpermute`: its custom-VJP
sort and an einsum over top-k; the backward is a gather too, with use_custom_sort_vjp=true, MaxText's default).
The result is set against one grouped GEMM of the same layer (hidden -> expert FFN).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from moekit.base.figures import significant
from moekit.bench import gmm
from moekit.bench.timing import median_seconds

COMBINES = ("scatter_add", "gather_sum")
# How far the two combines may differ, relative to the largest combined value: the same top-k products summed in
# two orders, each sum rounding to the dtype (bf16 keeps 8 bits: a few of its 2**-8 steps; float32 about 1e-6).
AGREE_RTOL = {"bfloat16": 2**-5, "float16": 2**-8, "float32": 1e-5}


@dataclass(frozen=True, slots=True)
class Layer:
    """One MoE layer's dispatch/combine problem on one device."""

    tokens: int
    """Tokens on this device per step."""
    hidden: int
    """Model hidden size."""
    experts: int
    """Local experts."""
    topk: int
    """Experts per token."""
    ffn: int
    """Expert FFN size (for the grouped GEMM it is compared with)."""


def functions(layer: Layer) -> dict[str, Any]:
    """The jitted steps, by name: `dispatch` (top-k, stable sort by expert, gather, group sizes) and the two
    combines, `scatter_add` and `gather_sum`."""
    import jax
    import jax.numpy as jnp

    t, k = layer.tokens, layer.topk

    def dispatch(h, logits):
        weights, idx = jax.lax.top_k(logits, k)
        flat = idx.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        return h[order // k], order, jnp.bincount(flat, length=layer.experts), weights.reshape(-1)

    def scatter_add(y, order, weights):
        return jnp.zeros((t, y.shape[1]), y.dtype).at[order // k].add(y * weights[order][:, None].astype(y.dtype))

    def gather_sum(y, order, weights):
        back = y[jnp.argsort(order)].reshape(t, k, y.shape[1])
        return jnp.einsum("tkh,tk->th", back, weights.reshape(t, k).astype(y.dtype))

    return {"dispatch": jax.jit(dispatch), "scatter_add": jax.jit(scatter_add), "gather_sum": jax.jit(gather_sum)}


def run(
    layer: Layer,
    gmm_backend: str = "tokamax",
    dtype: str = "bfloat16",
    iters: int = 20,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time dispatch, both combines and one grouped GEMM of the layer; `progress` gets a line per step."""
    import time

    import jax
    import jax.numpy as jnp

    started = time.monotonic()

    def say(text: str) -> None:
        if progress is not None:
            progress(f"{text} ({time.monotonic() - started:.0f} s)")

    ks = jax.random.split(jax.random.PRNGKey(0), 2)
    h = jax.random.normal(ks[0], (layer.tokens, layer.hidden), dtype)
    logits = jax.random.normal(ks[1], (layer.tokens, layer.experts), jnp.float32)
    fns = functions(layer)
    xs, order, counts, weights = fns["dispatch"](h, logits)
    rows = {"dispatch": median_seconds(fns["dispatch"], h, logits, iters=iters)}
    say(f"[1/4] dispatch: {significant(rows['dispatch'] * 1e3)} ms")
    for i, name in enumerate(COMBINES):
        rows[name] = median_seconds(fns[name], xs, order, weights, iters=iters)
        say(f"[{i + 2}/4] combine {name}: {significant(rows[name] * 1e3)} ms")
    # Both combines must give the same tokens back (so the cheaper one is a drop-in).
    summed = fns["gather_sum"](xs, order, weights)
    diff = jnp.max(jnp.abs(fns["scatter_add"](xs, order, weights) - summed))
    tolerance = AGREE_RTOL.get(dtype, AGREE_RTOL["bfloat16"]) * float(jnp.max(jnp.abs(summed)))
    shape = gmm.Shape(layer.experts, layer.tokens * layer.topk, layer.hidden, layer.ffn)
    g = gmm.run(shape, [gmm_backend], ["balanced"], dtype=dtype, iters=iters)
    timed = [r for r in g["rows"] if r["backend"] == gmm_backend and r["ms"] is not None]
    gmm_ms = timed[0]["ms"] if timed else None
    say(f"[4/4] grouped GEMM {gmm_backend}: {'failed' if gmm_ms is None else f'{significant(gmm_ms)} ms'}")
    out = {
        "layer": asdict(layer),
        "dtype": dtype,
        "ms": {name: s * 1e3 for name, s in rows.items()},
        "combines_agree_max_abs": float(diff),
        "combines_tolerance": tolerance,
        "combines_agree": bool(float(diff) <= tolerance),
        "gmm": {"backend": gmm_backend, "ms": gmm_ms, "error": None if timed else g["rows"][-1]["error"]},
        "ratio_to_gmm": {},
    }
    if gmm_ms:
        for name in COMBINES:
            out["ratio_to_gmm"][f"dispatch+{name}"] = (out["ms"]["dispatch"] + out["ms"][name]) / gmm_ms
    return out


def format_table(result: dict[str, Any]) -> str:
    """`run`'s result as a markdown table: ms per step and (dispatch + combine) against one grouped GEMM."""
    ly, ms = result["layer"], result["ms"]
    g = result["gmm"]
    lines = [
        f"dispatch/combine: {ly['tokens']} tokens x top-{ly['topk']} over {ly['experts']} experts, "
        f"hidden {ly['hidden']}, {result['dtype']}",
        "| step | ms | (dispatch + combine) / grouped GEMM |",
        "|---|---|---|",
        f"| dispatch (top-k, sort, gather) | {significant(ms['dispatch'])} | |",
    ]
    for name in COMBINES:
        ratio = result["ratio_to_gmm"].get(f"dispatch+{name}")
        lines.append(f"| combine: {name} | {significant(ms[name])} | {'-' if ratio is None else f'{ratio:.2f}x'} |")
    gms = significant(g["ms"])
    lines.append(f"| one grouped GEMM ({g['backend']}, hidden -> {ly['ffn']}) | {gms} | {g['error'] or ''} |")
    diff, tol = result["combines_agree_max_abs"], result["combines_tolerance"]
    if result["combines_agree"]:
        lines.append(f"combines agree: max abs difference {diff:.3g}, within the tolerance {tol:.3g} (either will do)")
    else:
        lines.append(
            f"combines DIFFER: max abs difference {diff:.3g}, beyond the tolerance {tol:.3g}: one combine is wrong on "
            "this device; their times are not comparable"
        )
    return "\n".join(lines)
