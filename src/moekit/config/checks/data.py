"""Checks of the input pipeline that need no file: what MaxText would refuse, caught before launch.

Listed in config.checks.CHECKS. What needs the files themselves (do they exist, does the tokenizer load and
fit the model's vocabulary) is checked where they can be seen, just before training: moekit.preflight.data.
"""

from __future__ import annotations

from collections.abc import Iterator

from moekit.config.checks.problem import Problem
from moekit.config.schema import Config

FORMATS = {"hf": ("parquet", "json", "arrow"), "grain": ("arrayrecord", "parquet")}


def data_source_complete(cfg: Config) -> Iterator[Problem]:
    """A file-reading pipeline has its files (or a corpus moekit prepares), a format it reads and a tokenizer MaxText
    loads the way it is configured; the hf pipeline takes at most 1 worker and reads its files once."""
    d = cfg.data
    if d.corpus and (d.dataset_type not in FORMATS or d.format not in ("arrayrecord", "parquet")):
        yield Problem(
            "data.corpus",
            f"data.corpus={d.corpus} is prepared as arrayrecord or parquet shards for data=grain or hf; "
            f"dataset_type={d.dataset_type} format={d.format} reads neither",
            f"data={d.corpus} (Grain on ArrayRecord)",
        )
        return
    if d.dataset_type not in FORMATS:
        return
    if d.corpus and d.files:
        yield Problem(
            "data.files",
            f"data.corpus={d.corpus} trains on the shards moekit prepares; data.files={d.files} would be ignored",
            "drop data.files, or data.corpus=null to train on your files",
        )
    if not d.files and not d.corpus:
        yield Problem(
            "data.files",
            f"data={d.dataset_type} reads files, but data.files is not set",
            f"data.files='/path/to/train-*.{d.format or 'parquet'}' (in a pod: the path where the volume is mounted)",
        )
    if d.format not in FORMATS[d.dataset_type]:
        yield Problem(
            "data.format",
            f"data.format={d.format} is not one the {d.dataset_type} pipeline reads "
            f"({', '.join(FORMATS[d.dataset_type])})",
            f"data.format={FORMATS[d.dataset_type][0]}"
            + (" or data=grain (ArrayRecord)" if d.format == "arrayrecord" else ""),
        )
    if not d.tokenizer:
        yield Problem(
            "data.tokenizer",
            f"data={d.dataset_type} tokenizes text, but data.tokenizer is not set",
            "data.tokenizer=tokenizer.llama2 (shipped with MaxText), or a path to your model's tokenizer",
        )
    if d.dataset_type == "hf" and d.tokenizer_type != "huggingface":
        yield Problem(
            "data.tokenizer_type",
            "the hf pipeline loads every tokenizer with Hugging Face's AutoTokenizer; "
            f"tokenizer_type={d.tokenizer_type} would be ignored",
            "data.tokenizer_type=huggingface with a Hugging Face tokenizer (qwen3-tokenizer), or data=grain for a "
            "SentencePiece or tiktoken file",
        )
    if d.dataset_type == "hf" and d.epochs > 1:
        yield Problem(
            "data.epochs",
            f"MaxText's hf pipeline reads its files once (num_epoch=1); data.epochs={d.epochs}",
            "data=grain (it repeats the data), or data.epochs=1 and enough files for train.steps",
        )
    if d.dataset_type == "hf" and d.workers > 1:
        yield Problem(
            "data.workers",
            f"MaxText's hf pipeline allows at most 1 worker (more duplicate data); data.workers={d.workers}",
            "data.workers=1",
        )
    if d.dataset_type == "grain" and d.tokenizer_type == "tiktoken" and "tiktoken" not in (d.tokenizer or ""):
        yield Problem(
            "data.tokenizer",
            "MaxText loads a tiktoken tokenizer only from a path that contains 'tiktoken'",
            "data.tokenizer=tokenizer_llama3.tiktoken, or the data.tokenizer_type of your file",
        )


def segments_with_te_attention(cfg: Config) -> Iterator[Problem]:
    """cudnn_flash_te keeps tokens inside their segment only where MaxText hands it segment ids (THD: packed files);
    on synthetic rows it gets a dense mask, which TE reduces to one length per row (docs/performance.md, "Attention
    parity"). MaxText asks for a bound on the segments per row with packing on one process per node; on synthetic
    rows a bound >= 2 makes MaxText split each row into segments, so the bound there is 1."""
    attention = cfg.attention_kernel
    d = cfg.data
    if cfg.hardware.platform != "gpu" or attention != "cudnn_flash_te" or not d.packing:
        return
    synthetic = d.dataset_type == "synthetic"
    if synthetic and d.max_segments_per_seq >= 2:
        yield Problem(
            "data.max_segments_per_seq",
            f"attention=cudnn_flash_te on synthetic data with data.max_segments_per_seq={d.max_segments_per_seq}: "
            "MaxText then splits each synthetic row into up to that many segments and hands TE a dense segment "
            "mask, which TE reduces to the first segment's length; the other tokens' attention output is zero "
            "(measured at layer level: docs/performance.md, \"Attention parity\"), a different model",
            "data.max_segments_per_seq=1 (one segment per synthetic row)",
        )
    elif cfg.maxtext_hardware == "gpu" and d.max_segments_per_seq <= 0:
        yield Problem(
            "data.max_segments_per_seq",
            "attention=cudnn_flash_te with packing on one process per node: MaxText refuses it without a bound on "
            "the segments per row",
            "data.max_segments_per_seq=1 (one segment per synthetic row)" if synthetic
            else "data.max_segments_per_seq=32, or data.packing=false",
        )


def segments_with_jax_cudnn_attention(cfg: Config) -> Iterator[Problem]:
    """MaxText 0.2.5's cudnn_flash_jax takes no segment ids in training (`cudnn_jax_flash_attention`: causal mask
    only), so on rows holding several documents each token attends across the documents before it, where MaxText's
    other kernels keep it inside its own: a different model, whose losses do not compare with theirs."""
    attention = cfg.attention_kernel
    d = cfg.data
    if cfg.hardware.platform != "gpu" or attention not in ("cudnn_flash_jax", "tokamax_mosaic") or not d.packing:
        return
    if d.dataset_type != "synthetic" or d.max_segments_per_seq >= 2:
        yield Problem(
            "model.attention",
            f"attention={attention} on packed rows: MaxText hands it no segment ids, so tokens attend across the "
            "documents packed before them (MaxText's dot_product and cudnn_flash_te keep them inside their own); "
            "its losses do not compare with those kernels'",
            "model.attention=cudnn_flash_te with data.max_segments_per_seq=32 (segment ids, THD), or "
            "data.packing=false",
        )
