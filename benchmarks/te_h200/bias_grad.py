"""Time the gradient of MaxText's per-row expert bias (bias[experts_index]) two ways on this device.

MaxText 0.2.5's sparse path (moe=te_gmm, tokamax, ragged_dot) gives each routed row its expert's bias with a
gather; the gather's gradient is a scatter-add into the small bias table. moe=te_gmm replaces that gradient
with a one-hot matmul (src/moekit/te_gmm/bias.py). Shapes: the gpt-oss proxy (gpt_oss_120b_proxy_h200: 8,192
tokens x top-4 = 32,768 rows, 16 experts, width 2,880), bf16. Prints one JSON line per way.
    python benchmarks/te_h200/bias_grad.py [ROWS EXPERTS WIDTH]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from moekit.bench.timing import median_seconds  # noqa: E402
from moekit.te_gmm import bias  # noqa: E402


def main() -> None:
    rows, experts, width = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (32768, 16, 2880)
    key = jax.random.PRNGKey(0)
    table = jax.random.normal(key, (experts, width), jnp.bfloat16)
    index = jnp.sort(jax.random.randint(key, (rows,), 0, experts))
    upstream = jax.random.normal(jax.random.PRNGKey(1), (rows, width), jnp.bfloat16)
    ways = {"gather (MaxText)": lambda b, i: b[i], "expert_rows (moekit)": bias.expert_rows}
    grads = {}
    for name, rows_of in ways.items():
        grad = jax.jit(jax.grad(lambda b, i, f=rows_of: jnp.sum((f(b, i) * upstream).astype(jnp.float32))))
        seconds = median_seconds(grad, table, index)
        grads[name] = grad(table, index).astype(jnp.float32)
        print(
            json.dumps(
                {
                    "way": name,
                    "rows": rows,
                    "experts": experts,
                    "width": width,
                    "ms": round(seconds * 1e3, 3),
                    "device": str(jax.devices()[0].device_kind),
                    "jax": jax.__version__,
                }
            ),
            flush=True,
        )
    a, b = grads.values()
    print(json.dumps({"max_abs_diff": float(jnp.max(jnp.abs(a - b))), "max_abs": float(jnp.max(jnp.abs(a)))}))


if __name__ == "__main__":
    main()
