"""`moekit bench gmm|dispatch`: microbenchmarks of the MoE layer's pieces on this machine's first device.

Shapes (--shape): `dsv3` is DeepSeek-V3's per-GPU shape at expert parallelism 8: 256/8 = 32 local experts,
24,576 tokens (per-device batch 6 x seq 4096) x top-8, hidden 7168, expert FFN 2048. `small` is sized to
finish in seconds on a CPU. `auto` (the default) takes dsv3 on a GPU and small elsewhere; --experts,
--tokens, ... change single dimensions of the chosen shape. A size and time estimate is printed first, then
each kernel as it finishes (on stderr; the result goes to stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from moekit.base.errors import MoekitError

HELP = "microbenchmarks: grouped GEMM vs its ceiling (gmm), token dispatch/combine (dispatch)"

# name -> (experts, tokens, topk, hidden, ffn, timed calls per kernel)
SHAPES = {
    "dsv3": (32, 24576, 8, 7168, 2048, 20),  # DeepSeek-V3 671B per GPU at EP 8 (the blog's batch 6 x 4096)
    "small": (8, 512, 2, 256, 128, 3),  # seconds on a 2-core CPU (compilation takes most of them)
}
DIMS = ("experts", "tokens", "topk", "hidden", "ffn", "iters")
WAIT_S = 600  # a benchmark that needs longer than this on a CPU is refused before its probe starts


def _shape_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shape", choices=("auto", *SHAPES), default="auto", help="dsv3, small, or auto: dsv3 on a GPU, else small"
    )
    p.add_argument("--experts", type=int, help="local experts = groups (dsv3: 32)")
    p.add_argument("--tokens", type=int, help="tokens on the device per step (dsv3: 24576)")
    p.add_argument("--topk", type=int, help="experts per token (dsv3: 8)")
    p.add_argument("--hidden", type=int, help="model hidden size, the GEMM's K (dsv3: 7168)")
    p.add_argument("--ffn", type=int, help="expert FFN size, the GEMM's N (dsv3: 2048)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument("--iters", type=int, help="timed calls per kernel; the median is reported (dsv3: 20, small: 3)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--out", type=Path, help="also write the result with provenance as JSON to this file")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `gmm` and `dispatch` subcommands, each with the shape options."""
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


def resolve_shape(args: argparse.Namespace, platform: str) -> tuple[str, dict[str, int]]:
    """(shape name, dimensions): the --shape preset for this platform, with any dimension given on its own."""
    name = args.shape if args.shape != "auto" else ("dsv3" if platform == "gpu" else "small")
    dims = dict(zip(DIMS, SHAPES[name], strict=True))
    given = {k: getattr(args, k) for k in DIMS if getattr(args, k) is not None}
    return (name if not given else f"{name} with {', '.join(f'--{k} {v}' for k, v in given.items())}"), dims | given


def _check(args: argparse.Namespace, dims: dict[str, int]) -> None:
    from moekit.bench import gmm

    for name, value in dims.items():
        if value < 1:
            raise MoekitError(f"--{name}={value}: must be at least 1")
    if dims["topk"] > dims["experts"]:
        raise MoekitError(f"--topk={dims['topk']} exceeds --experts={dims['experts']}: choose topk <= experts")
    if args.bench == "gmm":
        unknown = [b for b in _list(args.backends) if b not in gmm.BACKENDS]
        if unknown:
            raise MoekitError(f"unknown back end(s) {unknown}: choose from {', '.join(gmm.BACKENDS)}")
        for s in _list(args.skews):
            try:
                gmm.group_sizes(dims["experts"], dims["experts"], s)
            except ValueError as exc:
                raise MoekitError(str(exc)) from None
        rows = dims["tokens"] * dims["topk"]
        if rows % dims["experts"]:
            raise MoekitError(
                f"tokens x topk = {rows} must be a multiple of --experts={dims['experts']} "
                "(the ceiling uses equal groups)"
            )
    elif args.gmm_backend not in gmm.BACKENDS:
        raise MoekitError(f"unknown --gmm-backend {args.gmm_backend}: choose from {', '.join(gmm.BACKENDS)}")


def _list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def run(args: argparse.Namespace) -> int:
    """Time the chosen benchmark: estimate and progress on stderr, the table or JSON on stdout; returns 0, or 1 when
    dispatch's two combines disagree."""
    import jax

    from moekit.bench import dispatch, gmm, timing

    platform = jax.devices()[0].platform
    shape_name, dims = resolve_shape(args, platform)
    _check(args, dims)

    def say(text: str) -> None:
        print(f"moekit bench: {text}", file=sys.stderr, flush=True)

    shape = gmm.Shape(dims["experts"], dims["tokens"] * dims["topk"], dims["hidden"], dims["ffn"])
    if args.bench == "gmm":
        runnable = [b for b in _list(args.backends) if gmm.available(b, platform)]  # as run() will find them
        kernels = 1 + len(runnable) * len(_list(args.skews))
        layer = None
    else:
        layer = dispatch.Layer(dims["tokens"], dims["hidden"], dims["experts"], dims["topk"], dims["ffn"])
        kernels = 2
    say(f"shape {shape_name} on {platform} (--shape dsv3: DeepSeek-V3's per-GPU shape; --shape small: seconds on CPU)")
    if platform != "gpu":  # the probe below runs the full shape: on a CPU, dsv3's takes longer than anyone waits
        need, have = timing.cpu_bytes(shape, args.dtype), os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        if need > have:  # before any compute: the kernel would be killed for memory after minutes of the others
            raise MoekitError(
                f"bench {args.bench} --shape {shape_name} on {platform}: at least {need / 2**30:.3g} GiB of memory for "
                f"its grouped GEMM (JAX's CPU ragged_dot copies the {shape.rows}x{shape.k} input once per group, "
                f"x{shape.groups}) and this host has {have / 2**30:.3g} GiB; fix: --shape small (seconds here), fewer "
                "--tokens, or a GPU"
            )
        least, rate = timing.least_seconds(shape, args.dtype, kernels, dims["iters"])
        if least > WAIT_S:
            raise MoekitError(
                f"bench {args.bench} --shape {shape_name} on {platform}: at least {timing.seconds(least)} of compute "
                f"({shape.flop / 1e12:.3g} TFLOP per GEMM call; this {platform} multiplies at {rate / 1e9:.3g} "
                f"GFLOP/s); fix: --shape small (seconds here), fewer --tokens, or a GPU"
            )
    try:
        gemm_s, bandwidth = timing.probe(shape, args.dtype)
    except Exception as exc:  # noqa: BLE001 - a shape one GEMM of cannot run (memory, dtype): the kernels cannot either
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise MoekitError(
            f"bench {args.bench}: shape {shape_name} cannot run here: its one-GEMM probe failed ({type(exc).__name__}: "
            f"{first}); nothing was timed.\n  fix: a smaller shape (--shape small, or smaller --tokens/--hidden/"
            "--ffn), or another --dtype"
        ) from None
    say(timing.estimate(shape, args.dtype, kernels, dims["iters"], gemm_s, bandwidth, platform, layer))
    if args.bench == "gmm":
        result = gmm.run(shape, _list(args.backends), _list(args.skews), args.dtype, dims["iters"], progress=say)
        text = gmm.format_table(result)
    else:
        result = dispatch.run(layer, args.gmm_backend, args.dtype, dims["iters"], progress=say)
        text = dispatch.format_table(result)
    result = {"bench": args.bench, "preset": shape_name, "provenance": timing.provenance(), **result}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    prov = result["provenance"]
    print(
        json.dumps(result, indent=2)
        if args.format == "json"
        else f"{text}\nmeasured {prov['date']} on {prov['device']} (jax {prov['versions'].get('jax')})"
    )
    return 1 if result.get("combines_agree") is False else 0  # two combines that disagree: a wrong kernel
