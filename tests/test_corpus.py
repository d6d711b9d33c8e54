"""Real text without a download: `moekit data prepare` (a folder -> shards MaxText reads, counted in tokens), the
data=stdlib corpus (this Python's standard library, prepared once per machine), and the FP8 loss-gap rule."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, compose, losses, moekit
from moekit import cli
from moekit.base import maxtext_files
from moekit.config.checks import problems
from moekit.observe.reports import loss_gap
from moekit.preflight import data as data_preflight
from moekit.prepare import corpus, text_shards
from moekit.translate.job import build

LLAMA2 = maxtext_files.assets_dir() / "tokenizers" / "tokenizer.llama2"


def tree(root: Path) -> Path:
    """A small source folder: code, prose, a nested folder, a hidden file that must be left out."""
    (root / "pkg").mkdir(parents=True)
    (root / "b.py").write_text("def add(a, b):\n    return a + b\n" * 40)  # 1,360 bytes: 3 documents of <= 512
    (root / "a.txt").write_text("The cat sat on the mat.\n")
    (root / "pkg" / "c.rst").write_text("Title\n=====\n\nSome prose about moekit.\n")
    (root / ".hidden").write_text("never read")
    return root


def arrayrecord_texts(path: Path) -> list[str]:
    from array_record.python.array_record_module import ArrayRecordReader
    from maxtext.input_pipeline.protos import example_pb2

    reader = ArrayRecordReader(str(path))
    try:
        records = reader.read(list(range(reader.num_records())))
    finally:
        reader.close()
    return [example_pb2.Example.FromString(r).features.feature["text"].bytes_list.value[0].decode() for r in records]


# ---- the folder -> shards step ----


def test_chunks_cut_at_line_ends_and_keep_every_byte():
    text = "".join(f"line {i}\n" for i in range(100))
    pieces = text_shards.chunks(text, 64)
    assert "".join(pieces) == text and all(len(p.encode()) <= 64 for p in pieces)
    assert all(p.endswith("\n") for p in pieces)
    long = "x" * 150 + "\n"  # a line longer than a document is cut on its own
    assert [len(p) for p in text_shards.chunks(long, 64)] == [64, 64, 23]
    assert text_shards.chunks("\n\n  \n", 64) == []


def test_prepare_writes_shards_maxtexts_grain_reads_with_the_tokens_counted(tmp_path):
    import sentencepiece

    src = tree(tmp_path / "src")
    files = text_shards.source_files(src)
    assert [f.relative_to(src).as_posix() for f in files] == ["a.txt", "b.py", "pkg/c.rst"]  # sorted, no hidden
    options = text_shards.Options(chunk_bytes=512, shards=2)
    first = text_shards.prepare(files, tmp_path / "out", options, source=str(src))
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "corpus.json",
        "train-00000-of-00002.arrayrecord",
        "train-00001-of-00002.arrayrecord",
    ]
    texts = [t for shard in sorted(out.glob("*.arrayrecord")) for t in arrayrecord_texts(shard)]
    assert "".join(texts) == "".join(f.read_text() for f in files)  # every byte, in order
    assert first.documents == len(texts) == 5 and first.files == 3
    sp = sentencepiece.SentencePieceProcessor(model_file=str(LLAMA2))
    assert first.tokens == sum(len(ids) for ids in sp.encode(texts)) and first.vocab == 32000
    assert data_preflight.columns(str(out / "train-00000-of-00002.arrayrecord"), "arrayrecord") == ["text"]
    assert json.loads((out / "corpus.json").read_text()) == first.to_dict()
    # the same files and options give the same bytes (another machine, another day)
    again = text_shards.prepare(files, tmp_path / "again", options, source=str(src))
    assert again.sha256 == first.sha256 and again.shards == first.shards
    parquet = text_shards.prepare(files, tmp_path / "pq", text_shards.Options(format="parquet", chunk_bytes=512))
    assert data_preflight.columns(str(tmp_path / "pq" / "train-00000-of-00005.parquet"), "parquet") == ["text"]
    assert (parquet.documents, parquet.tokens) == (first.documents, first.tokens)  # 8 shards asked, 5 documents


def test_the_command_prints_a_summary_and_refuses_with_exit_2(tmp_path, capsys):
    src = tree(tmp_path / "src")
    out = tmp_path / "shards"
    assert cli.main(["data", "prepare", str(src), "--out", str(out), "--suffix", "py,txt"]) == 0
    captured = capsys.readouterr()
    assert "prepared 2 files" in captured.out and "2 arrayrecord shards" in captured.out
    assert f"data.files='{out}/*.arrayrecord'" in captured.out
    assert re.search(r"100% \d+\.\d/\d+\.\d MB  2 files", captured.err), captured.err  # not a terminal: plain lines
    refusals = {
        "already exists": ["data", "prepare", str(src), "--out", str(out)],
        "holds no file": ["data", "prepare", str((tmp_path / "empty").mkdir() or tmp_path / "empty"), "--out", "x"],
        "is not a folder": ["data", "prepare", str(tmp_path / "missing"), "--out", str(tmp_path / "o1")],
        "give a source folder": ["data", "prepare", "--out", str(tmp_path / "o2")],
        "drop the folder": ["data", "prepare", "--stdlib", str(src)],
    }
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "x.txt").write_bytes(b"caf\xe9\n")  # latin-1, not UTF-8
    refusals["not UTF-8 text (byte 3)"] = ["data", "prepare", str(tmp_path / "bin"), "--out", str(tmp_path / "o3")]
    for phrase, argv in refusals.items():
        assert cli.main(argv) == 2, phrase
        err = capsys.readouterr().err
        assert phrase in err and "Traceback" not in err, (phrase, err)
    assert not (tmp_path / "o3").exists() and not list(tmp_path.glob(".o3.tmp-*"))  # nothing half-written


def test_prepared_shards_given_to_the_other_pipeline_get_one_right_hint(tmp_path, capsys):
    """`data prepare`'s default ArrayRecord shards given to data=hf: the first hint is data=grain (no vocabulary
    hint for a tokenizer the fix leaves behind); the vocabulary refusal names the tokenizer data=hf picked; a run
    that tokenizes the shards with another tokenizer than they were counted with says so."""
    src, out = tree(tmp_path / "src"), tmp_path / "shards"
    assert cli.main(["data", "prepare", str(src), "--out", str(out)]) == 0
    files = f"data.files={out}/*.arrayrecord"
    capsys.readouterr()
    for extra in ([], ["data.format=arrayrecord"]):
        assert cli.main(["train", "experiment=smoke", "data=hf", files, *extra, "--dry-run"]) == 2
        err = capsys.readouterr().err
        fixes = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("fix:")]
        assert len(fixes) == 1 and fixes[0].startswith("fix: data=grain ("), err
    assert cli.main(["data", "prepare", str(src), "--out", str(tmp_path / "pq"), "--format", "parquet"]) == 0
    capsys.readouterr()
    assert cli.main(["train", "experiment=smoke", "data=hf", f"data.files={tmp_path}/pq/*.parquet", "--dry-run"]) == 2
    assert "the tokenizer qwen3-tokenizer (data.tokenizer of data=hf) has 151,669 tokens" in capsys.readouterr().err
    wide = ["data.tokenizer=qwen3-tokenizer", "data.tokenizer_type=huggingface", "model.extra.vocab_size=151680"]
    wide += ["data.epochs=10"]  # the tree is small
    assert cli.main(["train", "experiment=smoke", "data=grain", files, *wide, "--dry-run"]) == 0
    said = capsys.readouterr()
    assert f"note: {out}/corpus.json counts " in said.out + said.err
    assert "tokens with tokenizer.llama2; this run tokenizes with qwen3-tokenizer" in said.out + said.err


def test_a_corpus_may_leave_out_a_file_in_another_encoding_and_names_it(tmp_path):
    src = tree(tmp_path / "src")
    (src / "latin.py").write_bytes(b"# caf\xe9\n")
    files = text_shards.source_files(src)
    with pytest.raises(text_shards.PrepareError, match="latin.py is not UTF-8"):
        text_shards.prepare(files, tmp_path / "strict")
    kept = text_shards.prepare(files, tmp_path / "out", skip_undecodable=True)
    assert kept.skipped == [str(src / "latin.py")] and kept.files == 3


# ---- the stdlib corpus as a data option ----


def test_stdlib_selection_is_sorted_bounded_and_leaves_out_tests():
    files = corpus.stdlib_files()
    root = corpus.stdlib_dir()
    rel = [f.relative_to(root) for f in files]
    assert rel == sorted(rel, key=lambda p: p.as_posix()) and len(files) > 100
    assert not [p for p in rel if {"test", "tests", "site-packages", "idlelib"} & set(p.parts)]
    assert sum(f.stat().st_size for f in files) <= corpus.BUDGET
    assert len(corpus.stdlib_files(budget=100_000)) < len(files)


def test_data_stdlib_composes_translates_and_is_checked():
    cfg = compose("smoke", ["data=stdlib"])
    assert problems(cfg) == [] and cfg.data.corpus == "stdlib" and cfg.data.files is None
    args = build(cfg, "/r", "/r/m").maxtext_args
    assert {"dataset_type=grain", "grain_file_type=arrayrecord", "num_epoch=100"} <= set(args)
    assert not [a for a in args if a.startswith("grain_train_files")]  # known on the training host only
    placed = corpus.for_run(cfg, {"MOEKIT_CACHE_DIR": "/c"}, dry_run=True).cfg
    assert placed.data.files == "/c/corpus/" + corpus.cache_folder("stdlib", corpus.options_of(cfg), {}).name + (
        "/*.arrayrecord"
    )
    for overrides, phrase in [
        (["data=stdlib", "data.files=/d/*"], "drop data.files"),
        (["data=stdlib", "data.format=json"], "data=stdlib (Grain on ArrayRecord)"),
        (["data=hf", "data.files=/d/x", "data.epochs=3"], "reads its files once"),
    ]:
        found = [str(p) for p in problems(compose("smoke", overrides))]
        assert any(phrase in p for p in found), (overrides, found)


def test_a_dry_run_before_the_first_run_shows_where_the_corpus_will_be(tmp_path):
    ready = corpus.for_run(compose("smoke", ["data=stdlib"]), {"MOEKIT_CACHE_DIR": str(tmp_path)}, dry_run=True)
    cfg = ready.cfg
    found, seen = data_preflight.problems(cfg)
    assert found == [] and seen.files == [] and seen.vocab == 32000
    assert f"the stdlib corpus (prepared when the run starts: {tmp_path}/corpus/" in data_preflight.found_text(
        cfg, seen
    )
    assert ready.record is None and not (tmp_path / "corpus").exists()


def test_an_unwritable_cache_stops_before_the_corpus_is_read(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(text_shards.PrepareError, match="MOEKIT_CACHE_DIR=<a writable folder>"):
        corpus.for_run(compose("smoke", ["data=stdlib"]), {"MOEKIT_CACHE_DIR": str(tmp_path / "file" / "cache")})


@pytest.fixture(scope="module")
def stdlib_run(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """One real CPU training of experiment=smoke on data=stdlib (8 steps), its corpus prepared in a fresh cache."""
    base = tmp_path_factory.mktemp("stdlib")
    run, cache = base / "run", base / "cache"
    proc = moekit(
        "train",
        "experiment=smoke",
        "data=stdlib",
        "train.steps=8",
        "train.learning_rate=1e-3",
        f"run.dir={run}",
        env={"MOEKIT_CACHE_DIR": str(cache)},
        timeout=900,
    )
    return run, cache, proc


@pytest.mark.integration
def test_smoke_trains_on_the_stdlib_corpus_and_records_it(stdlib_run):
    run, cache, proc = stdlib_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    prepared = list((cache / "corpus").glob("stdlib-py*/corpus.json"))
    assert len(prepared) == 1  # prepared by this run, in the cache, not the run directory
    record = json.loads((run / "corpus.json").read_text())
    assert record == json.loads(prepared[0].read_text())
    assert record["extra"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["files"] == len(corpus.stdlib_files()) and record["tokens"] > 1_000_000
    assert f"sha256 {record['sha256'][:16]}" in proc.stdout and "preparing the stdlib corpus" in proc.stderr
    args = json.loads((run / "job.json").read_text())["maxtext_args"]
    assert f"grain_train_files='{prepared[0].parent}/*.arrayrecord'" in args
    loss = losses(run)
    assert len(loss) == 8 and all(math.isfinite(x) for x in loss)
    assert loss[-1] < loss[0], loss
    log = (run / "maxtext.log").read_text()  # Grain's iterator is closed at exit without a traceback
    assert "Traceback" not in log and "Exception ignored" not in log, log[-3000:]


# ---- the FP8 loss-gap rule ----


def test_loss_gap_is_the_mean_relative_gap_over_the_last_fifth():
    ref = [10.0, 8.0, 6.0, 5.0, 4.5, 4.2, 4.0, 3.9, 3.8, 3.7]
    cand = [10.5, 8.5, 6.2, 5.1, 4.5, 4.2, 4.0, 3.9, 3.838, 3.7 * 0.99]
    g = loss_gap.loss_gap(cand, ref)
    assert g.window_steps == (8, 9) and g.steps == 10
    assert g.mean_relative_gap == pytest.approx((0.01 - 0.01) / 2) and g.meets_goal  # early steps do not count
    worse = loss_gap.loss_gap([x * 1.02 for x in ref], ref)
    assert worse.mean_relative_gap == pytest.approx(0.02) and not worse.meets_goal
    assert "**misses** the goal |gap| <= 1%" in loss_gap.describe(worse, "fp8", "bf16")
    for cand, reference, phrase in [
        (ref[:-1], ref, "same length"),
        (ref[:3], ref[:3], "at least 5"),
        ([*ref[:-1], math.nan], ref, "not finite at step 9"),
    ]:
        with pytest.raises(ValueError, match=phrase):
            loss_gap.loss_gap(cand, reference)


def test_only_twins_that_differ_in_precision_are_compared():
    base = ["data=stdlib", "moe=dense"]
    bf16 = compose("smoke", [*base, "precision=bf16"]).to_dict()
    fp32 = compose("smoke", [*base, "precision=fp32", "run.name=x"]).to_dict()
    ident = {"sha256": "a" * 64}
    assert loss_gap.not_comparable(fp32, bf16, ident, ident) == []
    reasons = loss_gap.not_comparable(
        compose("smoke", [*base, "precision=fp32", "train.per_device_batch_size=4", "train.seed=3"]).to_dict(),
        bf16,
        {"sha256": "b" * 64},
        ident,
    )
    text = "\n".join(reasons)
    assert "train.per_device_batch_size: 4 vs 2" in text and "train.seed" in text
    assert "different corpus shards" in text
    assert "the same precision" in "\n".join(loss_gap.not_comparable(bf16, bf16, ident, ident))
    other = compose("smoke", ["moe=ragged_dot", "precision=fp32", "data=stdlib"]).to_dict()
    assert any(r.startswith("moe.") for r in loss_gap.not_comparable(other, bf16, ident, ident))


@pytest.fixture(scope="module")
def fp32_twin(stdlib_run) -> Path:
    """stdlib_run's twin in fp32 (the same seed, data, steps and batch), trained after it from the same cache."""
    run, cache, proc = stdlib_run
    assert proc.returncode == 0
    twin = run.parent / "fp32"
    again = moekit(
        "train",
        "experiment=smoke",
        "data=stdlib",
        "precision=fp32",
        "train.steps=8",
        "train.learning_rate=1e-3",
        f"run.dir={twin}",
        env={"MOEKIT_CACHE_DIR": str(cache)},
        timeout=900,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "moekit: corpus python stdlib" in again.stdout and "preparing" not in again.stderr  # read from the cache
    return twin


def gap_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "loss_gap.py"), *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.soak
@pytest.mark.integration
def test_the_loss_gap_tool_on_real_twins_and_its_refusal(stdlib_run, fp32_twin, tmp_path):
    run = stdlib_run[0]
    same = gap_tool(str(run), str(run))
    assert same.returncode == 2 and "the same precision: nothing to compare" in same.stderr, same.stderr
    tool = gap_tool(str(fp32_twin), str(run), "--out", str(tmp_path / "gap.json"))
    assert tool.returncode in (0, 1), tool.stdout + tool.stderr
    record = json.loads((tmp_path / "gap.json").read_text())
    assert record["steps"] == 8 and record["window_steps"] == [6, 7]  # the last 20%: 2 of 8 steps
    cand, ref = losses(fp32_twin), losses(run)
    expected = sum((cand[i] - ref[i]) / ref[i] for i in (6, 7)) / 2
    assert record["mean_relative_gap"] == pytest.approx(expected) and record["meets_goal"] == (abs(expected) <= 0.01)
    assert record["candidate"]["corpus"]["sha256"] == record["reference"]["corpus"]["sha256"]
    assert record["candidate"]["versions"]["maxtext"] and "precision=fp32" in record["candidate"]["overrides"]
    assert f"{expected:+.2%}" in tool.stdout


# ---- scale and robustness of the folder -> shards step ----


def test_chunking_is_linear_in_line_length_and_cuts_at_characters():
    import time

    line = ("é" * 8_000_000) + "\n"  # a 16 MB line, two bytes a character: a cut must never split one
    start = time.perf_counter()
    pieces = text_shards.chunks(line, 4096)
    took = time.perf_counter() - start
    assert "".join(pieces) == line and all(len(p.encode()) <= 4096 for p in pieces)
    # Re-encoding the rest of the line at every cut (quadratic) took 630 s for a 50 MB line, about 65 s for this one;
    # one pass takes well under a second here. The bound leaves room for a loaded machine.
    assert took < 15, took


def test_progress_moves_within_one_large_file(tmp_path):
    import io

    src = tmp_path / "src"
    src.mkdir()
    (src / "one.txt").write_text(("the cat sat on the mat . " * 40 + "\n") * 3000)  # 3 MB in one file
    stream = io.StringIO()
    text_shards.prepare(text_shards.source_files(src), tmp_path / "out", stream=stream)
    shown = [ln.split("%")[0].strip() for ln in stream.getvalue().splitlines()]
    assert len(set(shown)) >= 3, stream.getvalue()  # batches of about 1 MB: not one jump from 0% to 100%


def test_binary_files_are_refused_as_text_or_left_out_of_a_corpus(tmp_path):
    src = tree(tmp_path / "src")
    (src / "blob.txt").write_bytes(b"\0" * 64)
    files = text_shards.source_files(src)
    with pytest.raises(text_shards.PrepareError, match="blob.txt is binary, not text .a NUL byte at byte 0."):
        text_shards.prepare(files, tmp_path / "strict")
    assert text_shards.prepare(files, tmp_path / "out", skip_undecodable=True).skipped == [str(src / "blob.txt")]


def test_an_output_folder_inside_the_source_is_never_read_back(tmp_path, capsys):
    src = tree(tmp_path / "src")
    assert cli.main(["data", "prepare", str(src), "--out", str(src / "shards")]) == 0
    first = capsys.readouterr().out
    assert cli.main(["data", "prepare", str(src), "--out", str(src / "shards2")]) == 0
    second = capsys.readouterr().out
    assert "prepared 3 files" in first and "prepared 3 files" in second  # neither shards nor corpus.json read


def test_a_killed_preparation_leaves_no_temporary_folder_and_a_users_folder_is_kept(tmp_path):
    import socket

    from moekit.rundir import claims

    out = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".out.tmp-{socket.gethostname()}-{dead.stdout.strip()}"  # moekit's claim, writer gone
    (stale / "x").mkdir(parents=True)
    (stale / claims.MARKER).write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    live = tmp_path / f".out.tmp-{socket.gethostname()}-{os.getpid()}-other"  # not ours to judge: kept
    live.mkdir()
    backup = tmp_path / ".out.tmp-backup"  # the user's, a day old: no claim, never removed
    (backup / "notes").mkdir(parents=True)
    os.utime(backup, (time.time() - 3 * 86400, time.time() - 3 * 86400))
    text_shards.prepare(text_shards.source_files(tree(tmp_path / "src")), out)
    assert not stale.exists() and live.exists() and (out / "corpus.json").is_file()
    assert (backup / "notes").is_dir()


def test_a_damaged_cached_corpus_is_detected_and_prepared_again(tmp_path, capsys):
    env = {"MOEKIT_CACHE_DIR": str(tmp_path / "cache")}
    options = text_shards.Options(chunk_bytes=4096, shards=2)
    src = tree(tmp_path / "src")
    out = corpus.cache_folder("stdlib", options, env)
    text_shards.prepare(text_shards.source_files(src), out, options, source="test")
    record = text_shards.read_summary(out)
    shard = out / record["shards"][0]["name"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    shard.write_bytes(bytes(data))
    assert text_shards.damaged(out, record) == [shard.name]
    found_out, found = corpus.cached("stdlib", options, env)
    assert "is damaged" in capsys.readouterr().err and found_out == out
    assert not text_shards.damaged(out, found) and found["source"].startswith("python stdlib")


def _lines(n_bytes: int, tag: str) -> str:
    line = f"{tag} the quick brown fox jumps over the lazy dog, again and again\n"
    return line * (n_bytes // len(line))


def test_prepare_holds_one_file_and_one_shard_at_a_time_not_the_corpus(tmp_path):
    """32 files of 384 KiB: Python's peak during the preparation stays under half the corpus (it held every document
    of every file before the shards were written: the whole corpus and more)."""
    import tracemalloc

    src = tmp_path / "src"
    src.mkdir()
    for i in range(32):
        (src / f"f{i:02d}.txt").write_text(_lines(384 * 2**10, f"file{i}"))
    files = text_shards.source_files(src)
    text_shards.prepare(files[:1], tmp_path / "warm")  # imports and the tokenizer's first load: not the corpus's
    tracemalloc.start()
    try:
        summary = text_shards.prepare(files, tmp_path / "out", text_shards.Options(shards=8))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary.bytes >= 12 * 2**20 - 32 * 100 and summary.documents == sum(s["documents"] for s in summary.shards)
    assert peak < summary.bytes / 2, f"peak {peak / 2**20:.1f} MiB for a {summary.bytes / 2**20:.1f} MiB corpus"


def test_a_file_changed_between_counting_and_writing_stops_the_preparation(tmp_path, monkeypatch):
    """The documents are cut again when written: a file whose text changed since it was counted is named, and
    nothing is kept (corpus.json would not describe the shards)."""
    src = tree(tmp_path / "src")
    files = text_shards.source_files(src, [".txt", ".py"])
    read, seen = text_shards.read_text, []

    def grows(path):  # the second read of the first file finds one more line
        seen.append(path)
        text = read(path)
        return text + "a line added meanwhile\n" if seen.count(path) == 2 and path == files[0] else text

    monkeypatch.setattr(text_shards, "read_text", grows)
    with pytest.raises(text_shards.PrepareError, match="changed while it was prepared"):
        text_shards.prepare(files, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


@pytest.mark.parametrize("fmt", text_shards.FORMATS)
def test_a_full_disk_during_prepare_is_one_line_and_leaves_nothing(tmp_path, fmt):
    """ArrayRecord's writer reports a full disk as RuntimeError, parquet's as OSError: both one line naming the
    folder and the fix, exit 2, no temporary folder left on the full disk."""
    from conftest import mount_tmpfs

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text(_lines(2**20, "a"))
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "64k")
    try:
        proc = moekit("data", "prepare", str(src), "--out", str(disk / "shards"), "--format", fmt)
        err = proc.stderr
        assert proc.returncode == 2 and "Traceback" not in err, err
        assert f"cannot write the shards into {disk / 'shards'}" in err and "Free space" in err, err
        assert list(disk.iterdir()) == [], "a temporary folder was left on the full disk"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
