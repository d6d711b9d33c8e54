"""Text files -> training shards MaxText's pipelines read, with the tokens the training's tokenizer counts (effects:
reads the source files, writes the shards).

Each file is cut at line boundaries into documents of at most `chunk_bytes` (MaxText trims every document to the
sequence length, so a whole file as one document would lose all but its first `seq_len` tokens). The documents go,
in the files' sorted order, into `shards` files of consecutive documents: ArrayRecord (tf.train.Example records with
a `text` feature: data=grain) or parquet (a `text` column: data=hf or data=grain). The same files and options give
the same bytes; `corpus.json` beside the shards records what went in (files, bytes, documents, tokens, the tokenizer,
each shard's sha256). The folder appears whole or not at all: it is written beside its place and renamed into it.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from moekit.base import bounded, failures, parse
from moekit.base.errors import MoekitError
from moekit.base.progress import Progress
from moekit.preflight import data as data_preflight
from moekit.rundir import claims

FORMATS = ("arrayrecord", "parquet")
MANIFEST = "corpus.json"
TOKENIZER = "tokenizer.llama2"  # shipped with MaxText; 32,000 tokens fit every model moekit configures
CHUNK_BYTES = 4096
SHARDS = 8
COLUMN = "text"
SMOKE_VOCAB = 129_280  # experiment=smoke's model (deepseek3-tiny): the command the summary suggests must fit it


class PrepareError(MoekitError):
    """The source or the output folder cannot be used as given."""


@dataclass(frozen=True, slots=True)
class Options:
    """How text becomes shards (each one changes the shards, so each is recorded in corpus.json)."""

    tokenizer: str = TOKENIZER
    """A tokenizer MaxText ships (a name in its assets/tokenizers) or a path."""
    tokenizer_type: str = "sentencepiece"
    """How MaxText loads it: sentencepiece, tiktoken or huggingface."""
    format: str = "arrayrecord"
    chunk_bytes: int = CHUNK_BYTES
    shards: int = SHARDS


@dataclass(slots=True)
class Summary:
    """What a preparation wrote: the identity recorded in corpus.json."""

    source: str
    files: int
    bytes: int
    documents: int
    tokens: int
    """Tokens of the documents as the tokenizer encodes them, without the BOS/EOS MaxText adds per document."""
    tokenizer: str
    tokenizer_type: str
    vocab: int
    format: str
    chunk_bytes: int
    column: str = COLUMN
    shards: list[dict] = field(default_factory=list)
    """Per shard: name, documents, bytes of text, sha256 of the file."""
    sha256: str = ""
    """sha256 over the shards' names and digests: one value that names the whole corpus."""
    extra: dict = field(default_factory=dict)
    """What the caller adds to the identity (the stdlib corpus: the Python it came from)."""
    skipped: list[str] = field(default_factory=list)
    """Files left out because they are not UTF-8 text (only where the caller allows it: the stdlib corpus)."""

    def to_dict(self) -> dict:
        """The corpus.json record."""
        return asdict(self)

    def glob(self, out: Path) -> str:
        """The data.files pattern of these shards in `out`."""
        return str(out / f"*.{self.format}")

    def text(self, out: Path, seconds: float | None = None) -> str:
        """The summary a person reads: what went in, what came out, where, and how to train on it."""
        took = f" in {seconds:.0f} s" if seconds is not None else ""
        if self.format == "parquet" and self.tokenizer_type == "huggingface":  # MaxText's Hugging Face pipeline
            data = f"data=hf data.tokenizer={self.tokenizer}"
        else:
            data = "data=grain" + ("" if self.format == "arrayrecord" else " data.format=parquet")
            data += f" data.tokenizer={self.tokenizer}" if self.tokenizer != TOKENIZER else ""
            data += f" data.tokenizer_type={self.tokenizer_type}" if self.tokenizer_type != "sentencepiece" else ""
        fit = f" model.extra.vocab_size={data_preflight.vocab_fit(self.vocab)}" if self.vocab > SMOKE_VOCAB else ""
        return (
            f"prepared {self.files:,} files ({self.bytes / 1e6:.1f} MB) -> {self.documents:,} documents, "
            f"{self.tokens:,} tokens ({self.tokenizer}, {self.vocab:,}-token vocabulary) in {len(self.shards)} "
            f"{self.format} shards{took}\n  at {bounded.shown(out)} (sha256 {self.sha256[:16]})\n"
            f"  train on it: moekit train experiment=smoke {data} data.files='{self.glob(out)}'{fit}"
        )


def source_files(src: Path, suffixes: Sequence[str] = (), exclude: Sequence[Path] = ()) -> list[Path]:
    """The regular files under `src` (hidden files and folders left out; only `suffixes` when given), sorted by
    their path relative to `src` so that every machine takes them in one order. Folders in `exclude` (the output
    of this preparation) and prepared folders (holding corpus.json) are left out: shards are never read back as
    text."""
    if not src.is_dir():
        raise PrepareError(f"{src} is not a folder; give a folder of text files")
    wanted = tuple(s if s.startswith(".") else f".{s}" for s in suffixes)
    skip = {p.resolve() for p in exclude}
    found = []
    for root, dirs, names in os.walk(src):
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".")
            and (Path(root) / d).resolve() not in skip
            and not (Path(root) / d / MANIFEST).is_file()
        ]
        for name in names:
            path = Path(root) / name
            if name.startswith(".") or not path.is_file() or (wanted and not name.endswith(wanted)):
                continue
            found.append(path)
    found.sort(key=lambda p: p.relative_to(src).as_posix())
    if not found:
        what = f" ending in {', '.join(wanted)}" if wanted else ""
        raise PrepareError(f"{src} holds no file{what}; give a folder of text files (or other --suffix)")
    return found


# What a tokenizer folder holds (Hugging Face, SentencePiece, tiktoken files).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "*.model", "*.tiktoken")
MIN_VOCAB = 2  # fewer tokens than this encode nothing (an empty vocabulary with its unknown token)

# Control characters no text file is made of (tab, line ends, form feed and escape sequences are text's own).
CONTROL_BYTES = bytes(b for b in [*range(0x20), 0x7F] if b not in b"\t\n\r\x0b\x0c\x1b")
TEXT_MAX_BYTES = 1024 * bounded.MiB  # one source file is read whole (and chunked) in memory
C1_CONTROLS = re.compile(rb"\xc2[\x80-\x9f]")  # U+0080..U+009F in UTF-8: control characters too
CONTROL_SHARE = 100  # more than 1 byte in this many a control character: binary (a stray one is left alone)


def read_text(path: Path) -> str:
    """A file's text (UTF-8); PrepareError names the file when it cannot be read, is larger than TEXT_MAX_BYTES or
    is not text."""
    try:
        data = bounded.read_bytes(path, TEXT_MAX_BYTES, "text file")
    except bounded.TooLarge as exc:
        raise PrepareError(f"{str(exc).splitlines()[0]}; split it into files of at most 1 GiB") from None
    except OSError as exc:
        shown = bounded.shown(path)
        raise PrepareError(f"{shown} cannot be read ({exc.strerror}); fix its permissions or leave it out") from None
    if (kind := parse.text_kind(data)) is not None:  # its zero bytes are not a binary file's
        raise PrepareError(
            f"{bounded.shown(path)} is {kind}, not UTF-8; convert it (iconv -f UTF-16 -t UTF-8 FILE > FILE.txt) or "
            "leave it out with --suffix"
        )
    nul = data.find(b"\0")
    if nul >= 0:  # valid UTF-8, but no text holds NUL: a binary file (an image, an archive, a database)
        raise PrepareError(
            f"{bounded.shown(path)} is binary, not text (a NUL byte at byte {nul}); leave it out with --suffix "
            "(e.g. .txt,.md)"
        )
    c1 = C1_CONTROLS.findall(data)
    controls = len(data) - len(data.translate(None, CONTROL_BYTES)) + len(c1)
    if controls * CONTROL_SHARE > len(data):  # valid UTF-8, but text this full of control characters is binary
        first = min(
            next((i for i, b in enumerate(data) if b in CONTROL_BYTES), len(data)),
            C1_CONTROLS.search(data).start() if c1 else len(data),
        )
        raise PrepareError(
            f"{bounded.shown(path)} is binary, not text ({controls:,} of its {len(data):,} bytes are control "
            "characters, the first "
            f"at byte {first}); leave it out with --suffix (e.g. .txt,.md)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PrepareError(
            f"{bounded.shown(path)} is not UTF-8 text (byte {exc.start}); convert it, or choose files with --suffix"
        ) from None


def chunks(text: str, chunk_bytes: int) -> list[str]:
    """`text` cut at line ends into pieces of at most `chunk_bytes` UTF-8 bytes (a longer line is cut on its own, at
    character boundaries); pieces holding only whitespace are dropped. Linear in the text's length, however long
    its lines (each line is encoded once)."""
    out: list[str] = []
    piece: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        data = line.encode("utf-8")
        n = len(data)
        if size and size + n > chunk_bytes:
            out.append("".join(piece))
            piece, size = [], 0
        if n > chunk_bytes:  # one long line: cut it by characters
            start = 0
            while n - start > chunk_bytes:
                end = start + chunk_bytes
                while end > start and data[end] & 0xC0 == 0x80:  # not inside a character's continuation bytes
                    end -= 1
                out.append(data[start:end].decode("utf-8"))
                start = end
            line, n = data[start:].decode("utf-8"), n - start
        piece.append(line)
        size += n
    if piece:
        out.append("".join(piece))
    return [c for c in out if c.strip()]


def token_counter(tokenizer: str, tokenizer_type: str) -> tuple[Callable[[list[str]], list[int]], int, str]:
    """(count tokens of each text, vocabulary size, resolved path), loaded with MaxText's own loader, as training
    loads it. PrepareError when it does not load."""
    from moekit.base import maxtext_files

    mt = maxtext_files.tokenizer_module()
    path = data_preflight.resolve_tokenizer(tokenizer)
    if os.path.isdir(path) and not any(
        any(Path(path).glob(pattern)) for pattern in TOKENIZER_FILES
    ):  # a Hugging Face loader would build an empty vocabulary from it and count every text as 0 tokens
        raise PrepareError(
            f"--tokenizer {tokenizer}: the folder {path} holds no tokenizer file ({', '.join(TOKENIZER_FILES)}); give "
            f"the folder a Hugging Face tokenizer was saved in, a tokenizer file, or one MaxText ships "
            f"({', '.join(maxtext_files.shipped_tokenizers())})"
        )
    try:
        tok = mt.build_tokenizer(path, tokenizer_type, False, False, os.environ.get("HF_TOKEN"))
    except Exception as exc:  # MaxText's loaders raise ValueError; Hugging Face raises OSError offline
        raise PrepareError(
            f"the {tokenizer_type} tokenizer {tokenizer!r} does not load: {str(exc).splitlines()[0][:300]}; use one "
            f"MaxText ships ({', '.join(maxtext_files.shipped_tokenizers())}) or a path, with its --tokenizer-type"
        ) from None
    if tokenizer_type == "sentencepiece":
        model = tok._tokenizer_model  # MaxText exposes no batch encode; the processor encodes a list on threads
        count, vocab = (lambda texts: [len(ids) for ids in model.encode(texts)]), int(model.GetPieceSize())
    else:
        vocab = int(tok.n_words) if tokenizer_type == "tiktoken" else len(tok.tokenizer)
        count = lambda texts: [len(tok.encode(t)) for t in texts]  # noqa: E731
    if vocab < MIN_VOCAB:
        raise PrepareError(
            f"the {tokenizer_type} tokenizer {tokenizer!r} loads with a {vocab}-token vocabulary: it cannot encode "
            "text. Give a real tokenizer (its folder must hold its files) and the matching --tokenizer-type"
        )
    return count, vocab, path


BATCH = 64  # documents tokenized at a time (256 KB at the default chunk size; their token ids, ~2.5 MB, are freed)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _write_arrayrecord(path: Path, texts: Iterable[str]) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter
    from maxtext.input_pipeline.protos import example_pb2

    writer = ArrayRecordWriter(str(path), "group_size:1")
    try:
        for text in texts:
            example = example_pb2.Example()
            example.features.feature[COLUMN].bytes_list.value.append(text.encode("utf-8"))
            writer.write(example.SerializeToString(deterministic=True))
    finally:
        writer.close()


def _write_parquet(path: Path, texts: Sequence[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({COLUMN: pa.array(list(texts), pa.string())}), str(path))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with bounded.open_regular(path, None, "text file") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_out(out: Path) -> None:
    """PrepareError unless `out` is a new folder that can be made (before any file is read)."""
    if out.exists():
        raise PrepareError(f"{out} already exists; choose another --out, or remove it to prepare again")
    parent = out.absolute().parent
    while not parent.exists() and parent != parent.parent:  # the folder the missing ones will be made in
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise PrepareError(
            f"{parent} is not a folder you can write; choose another --out (for data=stdlib: "
            "MOEKIT_CACHE_DIR=<a writable folder>)"
        )


def _check_options(options: Options) -> None:
    """Refuse options no preparation can use (PrepareError)."""
    if options.format not in FORMATS:
        raise PrepareError(f"--format {options.format}: one of {', '.join(FORMATS)}")
    if options.chunk_bytes < 64 or options.shards < 1:
        raise PrepareError("--chunk-bytes must be at least 64 and --shards at least 1")


def prepare(
    files: Sequence[Path],
    out: Path,
    options: Options = Options(),
    source: str = "",
    extra: dict | None = None,
    stream: TextIO | None = None,
    skip_undecodable: bool = False,
) -> Summary:
    """Write `files` as shards into the new folder `out` (atomically) and return what was written.

    `source` and `extra` go into corpus.json as given. A file that is not UTF-8 stops the preparation, or with
    `skip_undecodable` is left out and named in corpus.json's `skipped`.
    """
    _check_options(options)
    check_out(out)
    count, vocab, _ = token_counter(options.tokenizer, options.tokenizer_type)
    kept: list[tuple[Path, int, str, int]] = []  # each file read through: documents, its text's digest and bytes
    skipped: list[str] = []
    tokens = 0
    sizes = [_file_size(p) for p in files]
    bar = Progress(sum(sizes), "MB", stream, scale=1e6)  # in bytes: one large file moves the bar too
    done = finished = 0  # bytes tokenized; bytes of the files read through
    for path, size in zip(files, sizes, strict=True):
        finished += size
        try:
            text = read_text(path)
        except PrepareError:
            if not skip_undecodable or not path.is_file():
                raise
            skipped.append(str(path))
            done = finished
            continue
        pieces = chunks(text, options.chunk_bytes)
        for b in range(0, len(pieces), BATCH):  # tokenized in batches, the bar moving between them
            batch = pieces[b : b + BATCH]
            tokens += sum(count(batch))
            done += sum(len(p.encode("utf-8")) for p in batch)
            bar.update(min(done, bar.total), f"{len(files)} files, {tokens:,} tokens")
        kept.append((path, len(pieces), *_measured(text)))  # not the documents: they are cut again when written
        done = max(done, finished)  # whitespace dropped with empty pieces counts as read
        bar.update(min(done, bar.total), f"{len(files)} files, {tokens:,} tokens")
    bar.update(bar.total, f"{len(files)} files, {tokens:,} tokens")
    documents, total_bytes = sum(k[1] for k in kept), sum(k[3] for k in kept)
    if not documents:
        raise PrepareError(f"the {len(files)} file(s) of {source or 'the source'} hold no text")
    if not tokens:  # nothing to train on: stop before writing a corpus that `train` would find empty
        raise PrepareError(
            f"the tokenizer {options.tokenizer!r} made 0 tokens of {documents:,} documents; nothing was written. "
            "Give a tokenizer that encodes this text (--tokenizer, --tokenizer-type)"
        )
    shards = min(options.shards, documents)
    summary = Summary(
        source=source,
        files=len(files) - len(skipped),
        bytes=total_bytes,
        documents=documents,
        tokens=tokens,
        tokenizer=options.tokenizer,
        tokenizer_type=options.tokenizer_type,
        vocab=vocab,
        format=options.format,
        chunk_bytes=options.chunk_bytes,
        extra=dict(extra or {}),
        skipped=skipped,
    )
    remove_stale(out)
    tmp = out.with_name(f"{_tmp_prefix(out)}{socket.gethostname()}-{os.getpid()}")
    claims.remove_if_stale(tmp)  # this pid's own leftover only when it is moekit's (never a user's folder)
    held = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        held = claims.claim(tmp)  # claimed while written: no other moekit removes it
        _write_shards(tmp, _documents_again(kept, options.chunk_bytes), summary, shards, options.format)
        (tmp / MANIFEST).write_text(json.dumps(summary.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf8")
        held.release()
        os.rename(tmp, out)  # atomic: the folder is whole or absent (a rival writer of the same folder: one wins)
    except (OSError, RuntimeError) as exc:  # ArrayRecord's writer reports a full disk as RuntimeError
        _drop(tmp, held)
        if out.exists():  # another writer renamed its copy into place first
            raise PrepareError(f"{out} already exists (written by another process meanwhile)") from None
        full = failures.disk_full(exc)
        if isinstance(exc, RuntimeError) and not full:
            raise
        why = full or (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).strip()[:200])
        raise PrepareError(
            f"cannot write the shards into {out} ({why}); nothing was kept there. Free space on its disk or choose "
            "a folder you can write (for data=stdlib: MOEKIT_CACHE_DIR=<a writable folder>)"
        ) from None
    except BaseException:
        _drop(tmp, held)
        raise
    return summary


def _write_shards(tmp: Path, documents: Iterator[str], summary: Summary, shards: int, fmt: str) -> None:
    """`summary.documents` documents into `shards` files of consecutive documents, balanced by count (one shard in
    memory at a time), each recorded in `summary` with its sha256, and the digest of them all."""
    write = _write_arrayrecord if fmt == "arrayrecord" else _write_parquet
    combined, n = hashlib.sha256(), summary.documents
    for s in range(shards):
        part = list(itertools.islice(documents, (s + 1) * n // shards - s * n // shards))
        shard = f"train-{s:05d}-of-{shards:05d}.{fmt}"
        write(tmp / shard, part)
        digest = _sha256(tmp / shard)
        combined.update(f"{shard} {digest}\n".encode())
        size = sum(len(d.encode("utf-8")) for d in part)
        summary.shards.append({"name": shard, "documents": len(part), "bytes": size, "sha256": digest})
    summary.sha256 = combined.hexdigest()


def _measured(text: str) -> tuple[str, int]:
    """(the digest, the UTF-8 size) of a file's text, from one encoding of it."""
    data = text.encode("utf-8")
    return hashlib.blake2b(data, digest_size=16).hexdigest(), len(data)


def _documents_again(kept: Sequence[tuple[Path, int, str, int]], chunk_bytes: int) -> Iterator[str]:
    """The documents of the files read through, cut again file by file (one file in memory at a time);
    PrepareError when a file changed since it was counted (the shards would not hold what corpus.json says)."""
    for path, n, digest, size in kept:
        text = read_text(path)
        pieces = chunks(text, chunk_bytes)
        if len(pieces) != n or _measured(text) != (digest, size):
            raise PrepareError(f"{bounded.shown(path)} changed while it was prepared; prepare again when it is stable")
        yield from pieces


def _drop(tmp: Path, held: claims.Claim | None) -> None:
    """Remove the temporary folder this process made (never one it did not: `held` is None then)."""
    if held is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        held.release()


def _tmp_prefix(out: Path) -> str:
    return f".{out.name}.tmp-"


def remove_stale(out: Path) -> list[Path]:
    """Remove the temporary folders that killed preparations of `out` left beside it (a SIGKILL runs no clean-up):
    only moekit's (its claim file inside: rundir/claims.py) whose writer is provably gone; a folder without the
    claim (a user's `.out.tmp-backup/`) is never removed, however old. Returns those removed."""
    removed = []
    with contextlib.suppress(OSError):
        for tmp in out.parent.glob(f"{_tmp_prefix(out)}*"):
            if claims.remove_if_stale(tmp):
                removed.append(tmp)
    return removed


def read_summary(out: Path) -> dict | None:
    """The corpus.json of a prepared folder, or None when there is none (or it is damaged)."""
    with contextlib.suppress(OSError, ValueError, bounded.TooLarge):
        return parse.json_file(out / MANIFEST, 64 * bounded.MiB, "prepared data record", finite=False)
    return None


def damaged(out: Path, record: dict) -> list[str]:
    """The shards of a prepared folder that are missing or whose sha256 differs from corpus.json's ([]: intact)."""
    bad = []
    for shard in record.get("shards") or []:
        path = out / str(shard.get("name", ""))
        try:
            same = _sha256(path) == shard.get("sha256")
        except OSError:
            same = False
        if not same:
            bad.append(path.name)
    return bad
