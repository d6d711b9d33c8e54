"""`moekit bench gmm|dispatch`: microbenchmarks of the MoE layer's pieces on this machine's first device.

Defaults are DeepSeek-V3's per-GPU shape at expert parallelism 8: 256/8 = 32 local experts, 24,576 tokens
(per-device batch 6 x seq 4096) x top-8, hidden 7168, expert FFN 2048.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from moekit.errors import MoekitError

HELP = "microbenchmarks: grouped GEMM vs its ceiling (gmm), token dispatch/combine (dispatch)"


def _shape_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experts", type=int, default=32, help="local experts = groups (default 32)")
    p.add_argument("--tokens", type=int, default=24576, help="tokens on the device per step (default 24576)")
    p.add_argument("--topk", type=int, default=8, help="experts per token (default 8)")
    p.add_argument("--hidden", type=int, default=7168, help="model hidden size, the GEMM's K (default 7168)")
    p.add_argument("--ffn", type=int, default=2048, help="expert FFN size, the GEMM's N (default 2048)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument("--iters", type=int, default=20, help="timed calls per kernel; the median is reported")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--out", type=Path, help="also write the result with provenance as JSON to this file")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    g = sub.add_parser("gmm", help="grouped-GEMM latency and TFLOP/s vs the equal-group batched-matmul ceiling")
    _shape_arguments(g)
    g.add_argument(
        "--backends",
        default="tokamax,ragged_dot,te",
        help="comma list of: tokamax, tokamax_triton, ragged_dot, te (an unavailable one is reported, not fatal)",
    )
    g.add_argument(
        "--skews",
        default="balanced,dirichlet:1.0",
        help="group-size distributions: balanced, dirichlet:ALPHA (smaller = more skewed)",
    )
    d = sub.add_parser("dispatch", help="token dispatch and combine latency vs one grouped GEMM")
    _shape_arguments(d)
    d.add_argument("--gmm-backend", default="tokamax", help="grouped GEMM to compare with (default tokamax)")


def run(args: argparse.Namespace) -> int:
    from moekit.bench import dispatch, gmm
    from moekit.bench.timing import provenance

    for name in ("experts", "tokens", "topk", "hidden", "ffn", "iters"):
        if getattr(args, name) < 1:
            raise MoekitError(f"--{name}={getattr(args, name)}: must be at least 1")
    if args.topk > args.experts:
        raise MoekitError(f"--topk={args.topk} exceeds --experts={args.experts}: choose topk <= experts")
    if args.bench == "gmm":
        backends = [b for b in args.backends.split(",") if b]
        unknown = [b for b in backends if b not in gmm.BACKENDS]
        if unknown:
            raise MoekitError(f"unknown back end(s) {unknown}: choose from {', '.join(gmm.BACKENDS)}")
        skews = [s for s in args.skews.split(",") if s]
        for s in skews:
            try:
                gmm.group_sizes(args.experts, args.experts, s)
            except ValueError as exc:
                raise MoekitError(str(exc)) from None
        rows = args.tokens * args.topk
        if rows % args.experts:
            raise MoekitError(
                f"tokens x topk = {rows} must be a multiple of --experts={args.experts} (the ceiling uses equal groups)"
            )
        result = gmm.run(gmm.Shape(args.experts, rows, args.hidden, args.ffn), backends, skews, args.dtype, args.iters)
        text = gmm.format_table(result)
    else:
        if args.gmm_backend not in gmm.BACKENDS:
            raise MoekitError(f"unknown --gmm-backend {args.gmm_backend}: choose from {', '.join(gmm.BACKENDS)}")
        layer = dispatch.Layer(args.tokens, args.hidden, args.experts, args.topk, args.ffn)
        result = dispatch.run(layer, args.gmm_backend, args.dtype, args.iters)
        text = dispatch.format_table(result)
    result = {"bench": args.bench, "provenance": provenance(), **result}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    prov = result["provenance"]
    print(
        json.dumps(result, indent=2)
        if args.format == "json"
        else f"{text}\nmeasured {prov['date']} on {prov['device']} (jax {prov['versions'].get('jax')})"
    )
    return 0
