"""Before training on real data, check it where it can be seen: on the host that runs `moekit train`.

The files exist and hold the text column, the tokenizer loads the way MaxText loads it and its vocabulary fits
the model's, the sequence length fits the model's context. Every problem is reported at once, before MaxText
starts (a missing file would otherwise surface after start-up and compilation, minutes in).
"""

from __future__ import annotations

import glob
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from moekit.base import bounded, maxtext_files, parse
from moekit.config.checks import Problem
from moekit.config.schema import Config, Data
from moekit.plan import resolved_values
from moekit.preflight import data_capacity

REMOTE = ("gs://", "hf://", "s3://", "http://", "https://")


@dataclass(frozen=True, slots=True)
class Found:
    """What the data checks found, for `found_text`: the local files, the tokenizer and its vocabulary."""

    files: list[str]
    """Local files matching data.files (remote patterns are left to MaxText)."""
    tokenizer_path: str | None
    """The tokenizer file or folder, resolved against MaxText's shipped tokenizers."""
    vocab: int | None
    """Tokens in the tokenizer's vocabulary."""


def patterns(data: Data) -> list[str]:
    """The file patterns of data.files: grain's weighted mixture 'a*,0.7;b*,0.3' gives a* and b*."""
    if data.dataset_type == "grain" and ";" in (data.files or ""):
        return [part.rsplit(",", 1)[0].strip() for part in (data.files or "").split(";") if part.strip()]
    return [data.files] if data.files else []


def resolve_tokenizer(name: str) -> str:
    """A path as given, else the tokenizer MaxText ships under that name, else the name (a Hugging Face id)."""
    if os.path.exists(name) or name.startswith(REMOTE):
        return name
    shipped = maxtext_files.assets_dir() / "tokenizers" / os.path.basename(name)
    return str(shipped) if shipped.exists() else name


def vocab_size(path: str, tokenizer_type: str) -> int:
    """Load the tokenizer with MaxText's own loader and count its tokens."""
    tokenizer = maxtext_files.tokenizer_module()
    tok = tokenizer.build_tokenizer(path, tokenizer_type, True, True, os.environ.get("HF_TOKEN"))
    if tokenizer_type == "tiktoken":
        return int(tok.n_words)
    if tokenizer_type == "huggingface":
        return len(tok.tokenizer)
    return int(tok._tokenizer_model.GetPieceSize())  # SentencePieceProcessor: MaxText exposes no public count


def vocab_fit(vocab: int) -> int:
    """The model vocabulary moekit suggests for a tokenizer of `vocab` tokens: rounded up to a multiple of 128 (the
    one number every message, `data prepare`'s summary and conf/data/hf.yaml's run line give)."""
    return -(-vocab // 128) * 128


def columns(path: str, fmt: str) -> list[str]:
    """The columns (features) of the first record of one data file."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    if fmt == "arrow":
        import pyarrow as pa

        with pa.memory_map(path) as source:
            try:
                return list(pa.ipc.open_stream(source).schema.names)
            except pa.ArrowInvalid:
                return list(pa.ipc.open_file(source).schema.names)
    if fmt == "json":
        with bounded.open_text(path, None, "data file") as f:
            first = next((line for line in f if line.strip()), "{}")
        record = parse.json_line(first, str(path), finite=False)
        return list(record[0] if isinstance(record, list) and record else record)
    from array_record.python.array_record_module import ArrayRecordReader
    from maxtext.input_pipeline.protos import example_pb2

    reader = ArrayRecordReader(path)
    try:
        example = example_pb2.Example.FromString(reader.read([0])[0]) if reader.num_records() else None
    finally:
        reader.close()
    return sorted(example.features.feature) if example else []


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def problems(cfg: Config) -> tuple[list[Problem], Found]:
    """What is wrong with the data for this config on this host (empty when it is ready).

    The checks run in the order a user fixes them: the files, what they hold, the tokenizer, then how the tokenizer
    and the sequence length fit the model.
    """
    host = socket.gethostname()
    files, out = _local_files(cfg.data, host)
    out += _content_problems(cfg, files)
    path, vocab, tokenizer_problems = _tokenizer(cfg.data, host)
    out += tokenizer_problems
    other_pipeline = any(p.key == "data.format" and p.fix.startswith("data=") for p in out)
    # the fix moves the run to another pipeline (and its tokenizer): this one's vocabulary is not the question then
    out += _model_fit_problems(cfg, None if other_pipeline else vocab)
    return out, Found(files, path, vocab)


# What a file's name says it holds (moekit data prepare writes *.arrayrecord or *.parquet).
SUFFIX_FORMATS = {
    ".arrayrecord": "arrayrecord",
    ".parquet": "parquet",
    ".json": "json",
    ".jsonl": "json",
    ".arrow": "arrow",
}


def _format_fix(d: Data, path: str) -> str:
    """The fix for files this pipeline cannot read as data.format: the format their name says, or the pipeline that
    reads it (ArrayRecord shards, `data prepare`'s default, given to data=hf: data=grain)."""
    from moekit.config.checks.data import FORMATS

    seen = SUFFIX_FORMATS.get(Path(path).suffix.lower())
    if seen and seen in FORMATS.get(d.dataset_type, ()):
        return f"data.format={seen}"
    readers = [kind for kind, formats in FORMATS.items() if seen in formats]
    if readers:
        return (
            f"data={readers[0]} (the files are {seen}, which data={d.dataset_type} does not read), or prepare them "
            f"with `moekit data prepare --format {FORMATS[d.dataset_type][0]}`"
        )
    return "data.format=<the files' format>"


def _local_files(d: Data, host: str) -> tuple[list[str], list[Problem]]:
    """The non-empty local files matching data.files, and the problems: a pattern that matches nothing, empty files.

    Remote patterns are left to MaxText; a pattern of a corpus the run prepares itself may match nothing yet.
    """
    out: list[Problem] = []
    files: list[str] = []
    for pattern in patterns(d):
        if pattern.startswith(REMOTE):
            continue
        matched = sorted(glob.glob(os.path.expanduser(pattern)))
        if not matched and d.corpus:  # --dry-run before the first run on this host: the run prepares them
            continue
        if not matched:
            out.append(
                Problem(
                    "data.files",
                    f"no file matches {pattern!r} on {host}",
                    "check the path; in a pod, the path where the data volume is mounted (docs/adapting.md)",
                )
            )
        files += matched
    special = [f for f in files if not (os.path.isfile(f) or os.path.isdir(f))]  # a pipe, device, socket
    if special:
        shown = ", ".join(bounded.shown(f) for f in special[:3]) + (
            f" and {len(special) - 3} more" if len(special) > 3 else ""
        )
        out.append(
            Problem(
                "data.files",
                f"{len(special)} of the {len(files)} path(s) matching data.files are not regular files: {shown}",
                "point data.files at files (a pipe, device or socket is never read as data)",
            )
        )
        files = [f for f in files if f not in special]
    empty = [f for f in files if _size(f) == 0]
    if empty:
        shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        out.append(
            Problem(
                "data.files",
                f"{len(empty)} of the {len(files)} file(s) matching data.files are empty (0 bytes): {shown}",
                "remove the empty files (an interrupted copy or export leaves them), or point data.files at files "
                "that hold the data",
            )
        )
        files = [f for f in files if f not in empty]
    return files, out


def _content_problems(cfg: Config, files: list[str]) -> list[Problem]:
    """What is wrong with what the files hold (format, text column, capacity) and with grain's workers per file."""
    d, out = cfg.data, []
    if files:
        fmt = d.format or "parquet"
        try:
            present = columns(files[0], fmt)
        except Exception as exc:  # a file of another format, or a damaged one
            present = None
            out.append(Problem("data.format", f"{files[0]} is not readable as {fmt}: {exc}", _format_fix(d, files[0])))
        if present is not None and d.column not in present:
            out.append(
                Problem(
                    "data.column",
                    f"{files[0]} has no column {d.column!r} (it has: {', '.join(present) or 'none'})",
                    f"data.column={present[0] if present else 'text'}",
                )
            )
        if present is not None and d.column in present:
            out += data_capacity.problems(cfg, files)
    if d.dataset_type == "grain" and d.format == "parquet" and files:
        per_process = max(len(files) // cfg.num_processes, 1)  # MaxText's compute_file_sharding
        if d.workers > per_process:
            out.append(
                Problem(
                    "data.workers",
                    f"{d.workers} grain workers per process, but each of the {cfg.num_processes} processes reads "
                    f"{per_process} of the {len(files)} parquet files (MaxText refuses more workers than files)",
                    f"data.workers={per_process}, or split the data into more files",
                )
            )
    return out


def _tokenizer(d: Data, host: str) -> tuple[str | None, int | None, list[Problem]]:
    """The tokenizer's resolved path and vocabulary size (None when it is unset or does not load), and the problem."""
    if not d.tokenizer:
        return None, None, []
    path = resolve_tokenizer(d.tokenizer)
    kind = "huggingface" if d.dataset_type == "hf" else d.tokenizer_type
    try:
        return path, vocab_size(path, kind), []
    except Exception as exc:  # MaxText's loaders raise ValueError; Hugging Face raises OSError offline
        problem = Problem(
            "data.tokenizer",
            f"the {kind} tokenizer {d.tokenizer!r} does not load: {str(exc).splitlines()[0][:300]}",
            f"data.tokenizer=<a path on {host}>, or one MaxText ships: "
            + ", ".join(maxtext_files.shipped_tokenizers()),
        )
        return path, None, [problem]


def _model_fit_problems(cfg: Config, vocab: int | None) -> list[Problem]:
    """Whether the tokenizer's vocabulary and the sequence length fit the model's embedding and context."""
    out = []
    values = resolved_values(cfg, *maxtext_files.model_values(cfg.model.name))
    model_vocab = int(values["vocab_size"])
    if vocab is not None and vocab > model_vocab:
        fit = vocab_fit(vocab)
        out.append(
            Problem(
                "data.tokenizer",
                f"the tokenizer {cfg.data.tokenizer} (data.tokenizer of data={cfg.data.dataset_type}) has {vocab:,} "
                f"tokens but the model's vocabulary is {model_vocab:,}: larger token ids "
                "would index past the embedding",
                f"model.extra.vocab_size={fit} (the tokenizer's size rounded up to 128), or a smaller tokenizer",
            )
        )
    if values.get("rope_type") == "yarn" and cfg.train.seq_len > int(values["max_position_embeddings"]):
        out.append(
            Problem(
                "train.seq_len",
                f"seq_len={cfg.train.seq_len} exceeds the model's context of {int(values['max_position_embeddings'])} "
                "positions (YaRN max_position_embeddings)",
                f"train.seq_len={int(values['max_position_embeddings'])}",
            )
        )
    return out


def found_text(cfg: Config, found: Found) -> str:
    """What the data check saw, one line (printed before launch)."""
    if found.files:
        files = f"{len(found.files)} {cfg.data.format} file(s)"
    elif cfg.data.corpus:
        files = f"the {cfg.data.corpus} corpus (prepared when the run starts: {cfg.data.files})"
    else:
        files = "remote files (not checked here)"
    tokens = f"{found.vocab:,} tokens" if found.vocab is not None else "?"
    name = Path(found.tokenizer_path).name if found.tokenizer_path else "?"
    return f"data: {files}, column {cfg.data.column!r}; tokenizer {name} ({tokens})" + _counted_with(cfg, found)


def _counted_with(cfg: Config, found: Found) -> str:
    """A note when the files are shards `moekit data prepare` counted with another tokenizer than this run's: its
    token count is not this run's."""
    folder = Path(found.files[0]).parent if found.files else None
    if folder is None or not (folder / "corpus.json").is_file():
        return ""
    try:
        record = parse.json_file(folder / "corpus.json", 16 * 2**20, "corpus.json")
        counted, tokens = str(record["tokenizer"]), int(record["tokens"])
    except (OSError, ValueError, TypeError, KeyError, bounded.TooLarge):
        return ""
    if Path(counted).name == Path(cfg.data.tokenizer or "").name:
        return ""
    return (
        f"\n  note: {folder / 'corpus.json'} counts {tokens:,} tokens with {counted}; this run tokenizes with "
        f"{cfg.data.tokenizer}, so its token count differs (data.tokenizer={counted} trains on what was counted)"
    )
