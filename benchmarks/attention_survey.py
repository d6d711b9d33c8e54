"""Every attention implementation JAX reaches on this stack, timed and checked at one shape each.

For each implementation x shape: forward and backward time of one causal attention call (bf16, batch 1 unless
--batch), TFLOP/s with the FLOPs counted as MaxText 0.2.5 counts them (`calculate_mla_tflops_per_device` and the
GQA formula in maxtext_utils: forward = batch * seq^2 * heads * (q/k head + v head), halved twice over for a causal
mask and the multiply-add already folded in; backward = 2x forward), and the max relative difference of the forward
output and dQ, dK, dV against the fp32 reference of benchmarks/attention_parity.py. An implementation that does not
run at a shape (not installed, unsupported head dims, out of memory) is a row with its error.

    python benchmarks/attention_survey.py --out DIR                        # GPU: the MLA and GQA shapes, seq 4096
    python benchmarks/attention_survey.py --out DIR --seq 256 --shapes mla:8:8:48:32,gqa:8:2:32:32   # CPU rehearsal
    python benchmarks/attention_survey.py --record DIR/attention_survey.json   # the table into docs/performance/

Implementations (the names in the table):
  maxtext:<kernel>    MaxText's own AttentionOp (what a training step runs) with attention=<kernel>: dot_product,
                      cudnn_flash_jax, cudnn_flash_te, flash (tokamax's Pallas Triton kernel on GPU); one segment
                      per row, as synthetic data trains
  jax.nn:<impl>       jax.nn.dot_product_attention(implementation=<impl>): cudnn, xla
  tokamax:<impl>      tokamax.dot_product_attention(implementation=<impl>): mosaic (Mosaic GPU, SM90 kernels for the
                      forward and backward), triton, cudnn, xla_chunked
  pallas:mgpu         jax.experimental.pallas.ops.gpu.attention_mgpu (Hopper, fp16 only: inputs cast to fp16, v padded
                      to the q/k head dim where they differ; FLOPs still counted at the real dims)
TransformerEngine 2.20.2 offers no FP8 attention in JAX (transformer_engine/jax/attention.py and
cpp_extensions/attention.py have no FP8 path): there is no FP8 row to measure.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attention_parity as parity  # noqa: E402  (the fp32 reference, MaxText's config and the difference measure)

from moekit.bench.timing import median_seconds  # noqa: E402  (compile, warm-up, then the median of the calls)

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "performance" / "attention_h200.md"
MARKERS = ("<!-- BEGIN attention survey (benchmarks/attention_survey.py --record) -->",
           "<!-- END attention survey -->")
IMPLEMENTATIONS = (
    "maxtext:cudnn_flash_jax", "maxtext:cudnn_flash_te", "maxtext:flash", "maxtext:dot_product",
    "jax.nn:cudnn", "jax.nn:xla",
    "tokamax:mosaic", "tokamax:triton", "tokamax:cudnn", "tokamax:xla_chunked",
    "pallas:mgpu",
)
BF16_PEAK = {"H100": 989.0, "H200": 989.0}  # dense BF16 TFLOP/s by the datasheets (SXM); the table's percentage


def attention_flops(batch: int, seq: int, heads: int, dqk: int, dv: int) -> float:
    """One causal attention forward as MaxText counts it: 2 * B*S * S * H * (dqk + dv) / 2."""
    return float(batch) * seq * seq * heads * (dqk + dv)


def _fn(impl: str, cfg, mesh, shape, seq: int):
    """(q, k, v) -> out for one implementation; the caller differentiates it."""
    import jax.numpy as jnp

    family, name = impl.split(":", 1)
    hq, hkv, dqk, dv = shape
    if family == "maxtext":
        from flax import nnx
        from maxtext.common.common_types import MODEL_MODE_TRAIN, AttentionType
        from maxtext.layers.attention_op import AttentionOp

        op = AttentionOp(
            config=cfg, mesh=mesh, attention_kernel=name, max_target_length=seq, num_query_heads=hq,
            num_kv_heads=hkv, float32_qk_product=cfg.float32_qk_product, float32_logits=cfg.float32_logits,
            dtype=jnp.bfloat16, attention_type=AttentionType.MLA if dqk != dv else AttentionType.GLOBAL,
            rngs=nnx.Rngs(0),
        )

        def run(q, k, v):
            seg = jnp.ones(q.shape[:2], jnp.int32)
            pos = jnp.broadcast_to(jnp.arange(q.shape[1], dtype=jnp.int32), q.shape[:2])
            return op(q, k, v, seg, pos, MODEL_MODE_TRAIN)

        return run
    if family == "jax.nn":
        import jax

        return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, scale=1.0, is_causal=True, implementation=name)
    if family == "tokamax":
        import tokamax

        return lambda q, k, v: tokamax.dot_product_attention(q, k, v, scale=1.0, is_causal=True,
                                                             implementation=name)
    if impl == "pallas:mgpu":
        from jax.experimental.pallas.ops.gpu import attention_mgpu as mgpu

        config = mgpu.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2, causal=True)

        def run(q, k, v):
            pad = q.shape[-1] - v.shape[-1]
            vp = jnp.pad(v, ((0, 0), (0, 0), (0, 0), (0, pad))) if pad else v
            out = mgpu.attention(q.astype(jnp.float16), k.astype(jnp.float16), vp.astype(jnp.float16), config)
            return out[..., : v.shape[-1]].astype(q.dtype)

        return run
    raise ValueError(f"unknown implementation {impl!r}; choose from {IMPLEMENTATIONS}")


def measure(args: argparse.Namespace) -> dict:
    import jax
    import jax.numpy as jnp
    from flax.core.spmd import logical_axis_rules
    from maxtext.utils import maxtext_utils

    platform = jax.devices()[0].platform
    shapes = dict(parity._parse_shape(s) for s in args.shapes.split(","))
    cfg = parity._config(args.seq, "bshd", platform)
    mesh = maxtext_utils.get_mesh_from_config(cfg, jax.devices()[:1])
    seg = jnp.ones((1, args.seq), jnp.int32)
    rows = []
    for shape_name, shape in shapes.items():
        hq, hkv, dqk, dv = shape
        keys = jax.random.split(jax.random.PRNGKey(args.seed), 4)
        b = args.batch
        q = (jax.random.normal(keys[0], (b, args.seq, hq, dqk)) * dqk**-0.5).astype(jnp.bfloat16)
        k = jax.random.normal(keys[1], (b, args.seq, hkv, dqk)).astype(jnp.bfloat16)
        v = jax.random.normal(keys[2], (b, args.seq, hkv, dv)).astype(jnp.bfloat16)
        dout = jax.random.normal(keys[3], (b, args.seq, hq, dv)).astype(jnp.bfloat16)
        # The reference on the first row of the batch (its fp32 logits are the memory bound).
        ref = parity._reference(q[:1], k[:1], v[:1], jnp.broadcast_to(seg, (1, args.seq)), dout[:1])
        flops = attention_flops(b, args.seq, hq, dqk, dv)
        for impl in args.implementations.split(","):
            row = {"implementation": impl, "shape": shape_name, "dims": list(shape), "seq": args.seq, "batch": b,
                   "forward_gflop": round(flops / 1e9, 3)}
            try:
                with jax.set_mesh(mesh), logical_axis_rules(cfg.logical_axis_rules):
                    fn = _fn(impl, cfg, mesh, shape, args.seq)
                    fwd = jax.jit(fn)

                    @jax.jit
                    def fwd_bwd(q, k, v, dout, fn=fn):
                        out, vjp = jax.vjp(fn, q, k, v)
                        return (out, *vjp(dout.astype(out.dtype)))

                    got = jax.block_until_ready(fwd_bwd(q, k, v, dout))
                    for name, x in zip(("forward", "dq", "dk", "dv"), got, strict=True):
                        row[name] = parity._rel(x[:1], ref[name])
                    del got
                    t_fwd = median_seconds(fwd, q, k, v, warmup=1, iters=args.repeats)
                    t_all = median_seconds(fwd_bwd, q, k, v, dout, warmup=1, iters=args.repeats)
                t_bwd = max(t_all - t_fwd, 1e-9)
                row.update(fwd_ms=round(t_fwd * 1e3, 3), bwd_ms=round(t_bwd * 1e3, 3),
                           fwd_tflops=round(flops / t_fwd / 1e12, 4), bwd_tflops=round(2 * flops / t_bwd / 1e12, 4),
                           train_tflops=round(3 * flops / t_all / 1e12, 4))
                worst = max(row[n] for n in ("forward", "dq", "dk", "dv"))
                row["status"] = "same" if worst <= parity.TOLERANCE else "differs"
            except Exception as exc:  # one implementation's failure is a row, not the end of the table
                row["status"] = "error"
                text = str(exc).strip().splitlines()
                row["error"] = f"{type(exc).__name__}: {text[0][:300] if text else ''}"
                traceback.print_exc(limit=2)
            rows.append(row)
            print(_line(row), flush=True)
            if args.out:  # after every row: a call cut short keeps what it measured
                partial = {"rows": rows, "tolerance": parity.TOLERANCE, "complete": False}
                (Path(args.out) / "attention_survey.json").write_text(json.dumps(partial, indent=1))
        del ref
    return {"what": "attention survey: forward/backward TFLOP/s (MaxText's causal count) and fp32 differences",
            "tolerance": parity.TOLERANCE, "rows": rows, "provenance": parity._provenance(), "complete": True}


def _line(row: dict) -> str:
    head = f"{row['implementation']:24s} {row['shape']:4s}"
    if row["status"] == "error":
        return f"{head} error: {row['error']}"
    return (f"{head} fwd {row['fwd_ms']:8.2f} ms {row['fwd_tflops']:6.1f} TF/s  bwd {row['bwd_ms']:8.2f} ms "
            f"{row['bwd_tflops']:6.1f} TF/s  train {row['train_tflops']:6.1f} TF/s  "
            + " ".join(f"{n}={row[n]:.1e}" for n in ("forward", "dq", "dk", "dv")) + f" {row['status']}")


def table(result: dict) -> str:
    """The markdown table: one row per implementation x shape, fastest same-model row first per shape."""
    prov = result["provenance"]
    device = str(prov.get("device"))
    peak = next((p for k, p in BF16_PEAK.items() if k in device), None)
    lines = [
        f"Measured on one {device} ({prov.get('date')}; jax {prov.get('jax')}, MaxText {prov.get('maxtext')}, "
        f"TransformerEngine {prov.get('transformer-engine', '-')}, cuDNN {prov.get('cudnn', '-')}) by "
        f"`benchmarks/attention_survey.py`: one causal call, bf16, batch {result['rows'][0]['batch']}, sequence "
        f"{result['rows'][0]['seq']}; TFLOP/s with MaxText's count (backward = 2x forward); % of the "
        f"{peak or '-'} dense BF16 TFLOP/s datasheet peak; differences max|x - ref| / max|ref| against fp32, "
        f"same = every tensor within {result['tolerance']:g}.",
        "",
        "| implementation | shape | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | fwd+bwd TFLOP/s | % peak "
        "| forward | dQ | dK | dV | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def order(r):
        return (r["shape"], r["status"] != "same", -(r.get("train_tflops") or 0))

    for r in sorted(result["rows"], key=order):
        hq, hkv, dqk, dv = r["dims"]
        dims = f"{r['shape']}: {hq}/{hkv} heads, q/k {dqk}, v {dv}"
        if r["status"] == "error":
            lines.append(f"| {r['implementation']} | {dims} | " + " | ".join(["-"] * 10)
                         + f" | error: {r['error'][:80].replace('|', '/')} |")
            continue
        pct = f"{r['train_tflops'] / peak:.0%}" if peak else "-"
        lines.append(
            f"| {r['implementation']} | {dims} | {r['fwd_ms']:.2f} | {r['fwd_tflops']:.1f} | {r['bwd_ms']:.2f} | "
            f"{r['bwd_tflops']:.1f} | {r['train_tflops']:.1f} | {pct} | "
            + " | ".join(f"{r[n]:.1e}" for n in ("forward", "dq", "dk", "dv")) + f" | {r['status']} |")
    return "\n".join(lines)


def record(path: str, doc: Path = DOC) -> None:
    """Write the table between the markers of the survey's page."""
    result = json.loads(Path(path).read_text()[:5_000_000])
    parity.fill(doc, MARKERS, table(result))
    print(f"recorded {len(result['rows'])} rows into {doc}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="folder for attention_survey.json")
    p.add_argument("--implementations", default=",".join(IMPLEMENTATIONS))
    p.add_argument("--shapes", default=",".join(parity.SHAPES), help="names of SHAPES or NAME:HQ:HKV:DQK:DV")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", metavar="JSON", help="write a result's table into " + str(DOC.relative_to(REPO)))
    args = p.parse_args()
    if args.record:
        record(args.record)
        return 0
    if not args.out:
        p.error("--out or --record is needed")
    unknown = [i for i in args.implementations.split(",") if i not in IMPLEMENTATIONS]
    if unknown:
        p.error(f"unknown implementations {unknown}; choose from {IMPLEMENTATIONS}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    result = measure(args)
    out = Path(args.out) / "attention_survey.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0 if any(r["status"] == "same" for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
