"""What the data files can give a run, read before launch: does the text column hold text, and are there enough
documents for the steps asked for.

MaxText does not fail a run whose data cannot be read or runs out: its train loop ends with "Training stopped"
and exit 0 (moekit then records the run as failed: base/failures.py, data_ended and data_error). What can be known
from the files is refused here instead, before anything starts.

The count is a sound bound, never an estimate: a document gives at most one sequence per `seq_len` tokens plus one
(packed or not, truncated or split), and a tokenizer gives at most one token per UTF-8 byte plus BOS and EOS.
So a run needing more sequences than `documents + (bytes + 2 * documents) / seq_len` per epoch is certain to run
out. Documents are counted from file metadata where the format has it; text bytes are read only when there are
fewer documents than sequences needed (small data, cheap to read).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from moekit.base import bounded, parse
from moekit.config.checks import Problem
from moekit.config.schema import Config


def column_type(path: str, fmt: str, column: str) -> str | None:
    """The type of the column's values when it is not text ('int64', 'list<item: string>', ...); None when it is
    text (or the column is absent: preflight.data reports that)."""
    if fmt in ("parquet", "arrow"):
        import pyarrow as pa

        schema = _arrow_schema(path, fmt)
        if column not in schema.names:
            return None
        kind = schema.field(column).type
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)  # null: no rows
        return None if text or str(kind) == "string_view" else str(kind)
    if fmt == "json":
        with bounded.open_text(path, None, "data file") as f:
            first = next((line for line in f if line.strip()), "{}")
        record = parse.json_line(first, str(path), finite=False)
        record = record[0] if isinstance(record, list) and record else record
        value = record.get(column) if isinstance(record, dict) else None
        return None if value is None or isinstance(value, str) else type(value).__name__
    example = _first_example(path)
    if example is None or column not in example.features.feature:
        return None
    kind = example.features.feature[column].WhichOneof("kind")
    return None if kind in (None, "bytes_list") else kind


def _arrow_schema(path: str, fmt: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if fmt == "parquet":
        return pq.read_schema(path)
    with pa.memory_map(path) as source:
        try:
            return pa.ipc.open_stream(source).schema
        except pa.ArrowInvalid:
            return pa.ipc.open_file(source).schema


def _first_example(path: str):
    from array_record.python.array_record_module import ArrayRecordReader
    from maxtext.input_pipeline.protos import example_pb2

    reader = ArrayRecordReader(path)
    try:
        return example_pb2.Example.FromString(reader.read([0])[0]) if reader.num_records() else None
    finally:
        reader.close()


@dataclass(frozen=True, slots=True)
class Counted:
    """Documents in the files and the UTF-8 bytes of their text (None: not read, there are documents enough)."""

    documents: int
    text_bytes: int | None


def _texts(path: str, fmt: str, column: str) -> Iterator[bytes]:
    """The column's values of one file, as UTF-8 bytes."""
    if fmt in ("parquet", "arrow"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if fmt == "parquet":
            table = pq.read_table(path, columns=[column])
        else:
            with pa.memory_map(path) as source:
                try:
                    table = pa.ipc.open_stream(source).read_all()
                except pa.ArrowInvalid:
                    table = pa.ipc.open_file(source).read_all()
        for value in table.column(column).to_pylist():
            yield (value or "").encode() if isinstance(value, str) else bytes(value or b"")
    elif fmt == "json":
        with bounded.open_text(path, None, "data file") as f:
            for line in f:
                if line.strip():
                    value = parse.json_line(line, str(path), finite=False).get(column)
                    yield str(value or "").encode()
    else:
        from array_record.python.array_record_module import ArrayRecordReader
        from maxtext.input_pipeline.protos import example_pb2

        reader = ArrayRecordReader(path)
        try:
            for i in range(reader.num_records()):
                feature = example_pb2.Example.FromString(reader.read([i])[0]).features.feature.get(column)
                yield b"".join(feature.bytes_list.value) if feature is not None else b""
        finally:
            reader.close()


def documents(path: str, fmt: str, enough: int) -> int:
    """Documents (rows, records, JSON lines) in one file; a JSON count stops once it passes `enough`."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    if fmt == "arrow":
        import pyarrow as pa

        with pa.memory_map(path) as source:
            try:
                reader = pa.ipc.open_file(source)
                return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
            except pa.ArrowInvalid:
                return sum(batch.num_rows for batch in pa.ipc.open_stream(source))
    if fmt == "json":
        n = 0
        with bounded.open_text(path, None, "data file") as f:
            for line in f:
                n += bool(line.strip())
                if n > enough:
                    break
        return n
    from array_record.python.array_record_module import ArrayRecordReader

    reader = ArrayRecordReader(path)
    try:
        return int(reader.num_records())
    finally:
        reader.close()


def count(files: list[str], fmt: str, column: str, needed: int) -> Counted:
    """Documents in `files`, and their text bytes when there are fewer documents than `needed` sequences."""
    docs = 0
    for path in files:
        docs += documents(path, fmt, needed)
        if docs >= needed:
            return Counted(docs, None)
    return Counted(docs, sum(len(t) for path in files for t in _texts(path, fmt, column)))


def most_sequences(counted: Counted, seq_len: int) -> int | None:
    """The most sequences of `seq_len` tokens one pass over the text can give (None: unbounded here)."""
    if counted.text_bytes is None:
        return None
    tokens = counted.text_bytes + 2 * counted.documents  # at most one token per byte, plus BOS and EOS
    return counted.documents + math.ceil(tokens / seq_len)


def capacity_problem(cfg: Config, files: list[str]) -> Problem | None:
    """A Problem when the local files cannot give train.steps x the global batch sequences (data.epochs passes);
    None when they can, or when it cannot be known here (remote files, a weighted mixture, a corpus)."""
    d = cfg.data
    if not files or d.corpus or ";" in (d.files or ""):
        return None
    passes = d.epochs if d.dataset_type == "grain" else 1  # the hf pipeline reads its files once
    needed = int(cfg.train.steps * cfg.global_batch)
    counted = count(files, d.format or "parquet", d.column, math.ceil(needed / passes))
    if counted.documents == 0:
        return Problem(
            "data.files",
            f"the {len(files)} file(s) matching data.files hold no documents (0 rows in column {d.column!r})",
            "point data.files at files that hold the data (an interrupted export leaves a schema and no rows)",
        )
    most = most_sequences(counted, cfg.train.seq_len)
    if most is None or most * passes >= needed:
        return None
    kb = (counted.text_bytes or 0) / 1000
    steps_possible = most * passes // max(int(cfg.global_batch), 1)
    epochs = "" if d.dataset_type != "grain" else f" x {passes} epoch(s)"
    fix_epochs = (
        f"data.epochs={math.ceil(needed / most)} (grain repeats the data), " if d.dataset_type == "grain" else ""
    )
    return Problem(
        "train.steps",
        f"the data cannot fill {cfg.train.steps} steps of {int(cfg.global_batch)} sequences ({needed:,} sequences): "
        f"{len(files)} file(s) hold {counted.documents:,} documents of {kb:,.1f} kB of text, at most {most:,} "
        f"sequences of {cfg.train.seq_len} tokens{epochs}; MaxText would stop when it runs out",
        f"train.steps={max(steps_possible, 1)}, {fix_epochs}or more data in data.files",
    )


TYPED_FILES = 32  # files whose column type is read (a schema each): enough to catch a mixed set, bounded for many


def problems(cfg: Config, files: list[str]) -> list[Problem]:
    """The column's type in each file, then (when it is text) whether the files hold enough for the run."""
    d, fmt, out = cfg.data, cfg.data.format or "parquet", []
    for path in files[:TYPED_FILES]:
        try:
            kind = column_type(path, fmt, d.column)
        except Exception:  # a damaged file: MaxText's own error will name it; the format check covers the first
            continue
        if kind is not None:
            out.append(
                Problem(
                    "data.column",
                    f"{path}: column {d.column!r} holds {kind} values, not text; MaxText's tokenizer would fail on "
                    "the first batch",
                    "data.column=<the column holding the text>, or write the text as strings",
                )
            )
            return out  # one file says enough; counting would read a column of the wrong type
    try:
        found = capacity_problem(cfg, files)
    except Exception:  # unreadable past the first file: left to MaxText
        found = None
    return [found] if found else []
