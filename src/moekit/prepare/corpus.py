"""Real text with no download: the running Python's standard library (its .py sources and .txt/.rst files), made
into shards once per machine and then read from moekit's cache (effects: reads the stdlib, writes the cache).

The selection is fixed so that machines with the same Python build see the same tokens: files sorted by their
path inside the stdlib, the folders distributions ship apart or leave out (tests, IDLE, tkinter, ensurepip, ...)
and build-specific files (_sysconfigdata*) left out, at most BUDGET bytes. The shards' sha256 in corpus.json (copied
into each run directory as corpus.json) tells whether two runs trained on the same text.
"""

from __future__ import annotations

import platform
import shutil
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from moekit.base import cache
from moekit.config.schema import Config
from moekit.prepare import text_shards

SUFFIXES = (".py", ".txt", ".rst")
# Folders left out wherever they sit: tests, and what Debian/Ubuntu and others package separately or drop.
LEFT_OUT = frozenset(
    {
        "site-packages",
        "dist-packages",
        "__pycache__",
        "test",
        "tests",
        "idle_test",
        "idlelib",
        "tkinter",
        "turtledemo",
        "ensurepip",
        "lib2to3",
        "distutils",
        "venv",
    }
)
BUILD_SPECIFIC = ("_sysconfigdata", "LICENSE.txt")  # the build's own values; the license sits elsewhere on Debian
BUDGET = 32 * 2**20  # bytes of source text at most (CPython 3.12.1 gives 513 files, 10.0 MB: all of them)
CORPORA = ("stdlib",)


def stdlib_dir() -> Path:
    """The running Python's standard library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None, budget: int = BUDGET) -> list[Path]:
    """The stdlib files of the corpus, in order, up to `budget` bytes."""
    root = root or stdlib_dir()
    picked, total = [], 0
    for path in text_shards.source_files(root, SUFFIXES):
        rel = path.relative_to(root)
        if LEFT_OUT & set(rel.parts[:-1]) or rel.name.startswith(BUILD_SPECIFIC):
            continue
        size = path.stat().st_size
        if total + size > budget:
            break
        picked.append(path)
        total += size
    return picked


def identity() -> dict[str, str]:
    """What the stdlib corpus depends on besides the options: the Python that supplies the text."""
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "stdlib": str(stdlib_dir()),
    }


def cache_folder(name: str, options: text_shards.Options, environ: Mapping[str, str] | None = None) -> Path:
    """Where a corpus is prepared: <moekit cache>/corpus/<name>-py<version>-<tokenizer>-<format>-<chunk>-<shards>."""
    version = platform.python_version()
    tok = Path(options.tokenizer).name
    tag = f"{name}-py{version}-{tok}-{options.format}-c{options.chunk_bytes}-s{options.shards}"
    return cache.cache_dir(environ) / "corpus" / tag


def options_of(cfg: Config) -> text_shards.Options:
    """The shard options the config's data section asks for."""
    return text_shards.Options(
        tokenizer=cfg.data.tokenizer or text_shards.TOKENIZER,
        tokenizer_type="huggingface" if cfg.data.dataset_type == "hf" else cfg.data.tokenizer_type,
        format=cfg.data.format or "arrayrecord",
    )


def cached(
    name: str,
    options: text_shards.Options,
    environ: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
    say: Callable[[str], None] | None = None,
) -> tuple[Path, dict]:
    """The corpus's folder and its corpus.json, preparing it first when this machine has none (`say` is told so
    first: a run's phase line)."""
    if name not in CORPORA:
        raise text_shards.PrepareError(f"data.corpus={name}: one of {', '.join(CORPORA)}")
    out = cache_folder(name, options, environ)
    found = text_shards.read_summary(out)
    if found is not None and not (bad := text_shards.damaged(out, found)):
        return out, found
    if found is not None:  # a shard changed since it was written (a disk error, an edit): prepared again
        print(
            f"moekit: the cached {name} corpus at {out} is damaged ({', '.join(bad[:3])} "
            f"{'differs' if len(bad) == 1 else 'differ'} from the sha256 in its {text_shards.MANIFEST}): preparing it "
            "again",
            file=stream or sys.stderr,
            flush=True,
        )
        shutil.rmtree(out)
    if out.exists():  # a folder without its record: not ours to trust, and not ours to delete
        raise text_shards.PrepareError(
            f"{out} exists without its {text_shards.MANIFEST}; remove it and the corpus is prepared again"
        )
    if say is not None:
        say(f"preparing the {name} corpus (once per machine)")
    try:
        summary = text_shards.prepare(
            stdlib_files(),
            out,
            options,
            source=f"python stdlib ({stdlib_dir()})",
            extra=identity(),
            stream=stream,
            skip_undecodable=True,  # a stdlib file in another encoding is left out (and named), not fatal
        )
    except text_shards.PrepareError:
        found = text_shards.read_summary(out)  # another process renamed its copy into place first: the same bytes
        if found is None:
            raise
        return out, found
    return out, summary.to_dict()


@dataclass(frozen=True)
class Ready:
    """A run's corpus, ready to train on: the config with data.files at its shards, the corpus's record (None for a
    config without data.corpus, and for a dry run, which prepares nothing) and the line that names it."""

    cfg: Config
    record: dict | None = None

    @property
    def line(self) -> str | None:
        """One line naming the corpus (describe), or None without a record."""
        return describe(self.record) if self.record is not None else None


def for_run(
    cfg: Config,
    environ: Mapping[str, str] | None = None,
    say: Callable[[str], None] | None = None,
    dry_run: bool = False,
) -> Ready:
    """The corpus a run trains on, in one call: prepared when this machine's cache has none or a damaged one (`say`
    is told first), placed (data.files at its shards), its record read and described. A dry run only places it,
    where it is or will be prepared, and prepares nothing. A config without data.corpus comes back unchanged."""
    if not cfg.data.corpus:
        return Ready(cfg)
    options = options_of(cfg)
    if dry_run:
        return Ready(_at(cfg, cache_folder(cfg.data.corpus, options, environ) / f"*.{options.format}"))
    out, record = cached(cfg.data.corpus, options, environ, say=say)
    return Ready(_at(cfg, out / f"*.{record['format']}"), record)


def _at(cfg: Config, files: Path) -> Config:
    """`cfg` with data.files=`files`."""
    return cfg.model_copy(update={"data": cfg.data.model_copy(update={"files": str(files)})})


def describe(record: dict) -> str:
    """One line naming a prepared corpus: what, which Python, how much, its digest."""
    python = (record.get("extra") or {}).get("python", "?")
    return (
        f"corpus {record.get('source', '?')}, python {python}: {record['files']:,} files, {record['tokens']:,} tokens "
        f"({record['tokenizer']}), {len(record['shards'])} {record['format']} shards, sha256 {record['sha256'][:16]}"
    )
