"""`moekit data prepare`: a folder of text files (or this Python's standard library) -> shards data=grain/hf read.

    moekit data prepare ~/texts --out /data/texts            # ArrayRecord shards for data=grain, llama2 tokens
    moekit data prepare ~/texts --out /data/t --format parquet --suffix .md,.txt
    moekit data prepare --stdlib                             # the corpus data=stdlib trains on, into moekit's cache

A progress bar goes to stderr; the summary (files, bytes, documents, tokens, shards, where, how to train on it) to
stdout. The output folder must not exist: it appears whole when done (corpus.json in it records what went in).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from moekit.prepare import corpus, text_shards

HELP = "turn a folder of text files (or --stdlib) into shards for data=grain/hf, counted in tokens"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `prepare` subcommand: source folder or --stdlib, --out, tokenizer, format, chunking, shards."""
    sub = p.add_subparsers(dest="data", required=True, metavar="ACTION")
    q = sub.add_parser("prepare", help="text files -> ArrayRecord or parquet shards, with a token count")
    q.add_argument("src", nargs="?", type=Path, help="a folder of UTF-8 text files (read recursively, sorted)")
    q.add_argument("--stdlib", action="store_true", help="this Python's standard library: data=stdlib's corpus")
    q.add_argument("--out", type=Path, help="a new folder for the shards (--stdlib: moekit's cache by default)")
    q.add_argument(
        "--format",
        choices=text_shards.FORMATS,
        default="arrayrecord",
        help="arrayrecord (data=grain) "
        "or parquet (data=hf with a Hugging Face tokenizer, or data=grain data.format=parquet)",
    )
    q.add_argument(
        "--tokenizer",
        default=text_shards.TOKENIZER,
        help=f"a tokenizer MaxText ships, or a path (default {text_shards.TOKENIZER}, 32,000 tokens)",
    )
    q.add_argument("--tokenizer-type", choices=("sentencepiece", "tiktoken", "huggingface"), default="sentencepiece")
    q.add_argument("--suffix", default="", help="comma list of file endings to take (default: every file)")
    q.add_argument(
        "--chunk-bytes",
        type=int,
        default=text_shards.CHUNK_BYTES,
        help=f"documents of at most this many bytes, cut at line ends (default {text_shards.CHUNK_BYTES})",
    )
    q.add_argument("--shards", type=int, default=text_shards.SHARDS, help=f"shard files (default {text_shards.SHARDS})")


def run(args: argparse.Namespace) -> int:
    """Prepare the shards and print the summary; a user error exits 2 (moekit.cli)."""
    options = text_shards.Options(args.tokenizer, args.tokenizer_type, args.format, args.chunk_bytes, args.shards)
    start = time.monotonic()
    if args.stdlib:
        if args.src is not None or args.suffix:
            raise text_shards.PrepareError("--stdlib takes its files from this Python; drop the folder and --suffix")
        out = args.out or corpus.cache_folder("stdlib", options)
        if args.out is None and (found := text_shards.read_summary(out)) is not None:
            print(f"already prepared: {corpus.describe(found)}\n  at {out}")
            return 0
        files = corpus.stdlib_files()
        source, extra = f"python stdlib ({corpus.stdlib_dir()})", corpus.identity()
    else:
        if args.src is None or args.out is None:
            raise text_shards.PrepareError("give a source folder and --out DIR (or --stdlib)")
        text_shards.check_out(args.out)  # before reading anything
        out, extra = args.out, {}
        suffixes = [s.strip() for s in args.suffix.split(",") if s.strip()]
        files = text_shards.source_files(args.src, suffixes, exclude=[args.out])  # shards are never read back
        source = str(args.src.resolve())
    summary = text_shards.prepare(
        files, out.absolute(), options, source=source, extra=extra, skip_undecodable=args.stdlib
    )
    print(summary.text(out.absolute(), time.monotonic() - start))
    if args.stdlib and args.out is None:
        print("  or: moekit train experiment=smoke data=stdlib (reads it from this cache)")
    return 0
