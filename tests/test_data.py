"""Real data: MaxText's Grain and Hugging Face pipelines on files the tests write, checked before launch."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from conftest import compose, losses, moekit
from moekit.config.checks import problems
from moekit.preflight import data as data_preflight
from moekit.translate.job import build
from test_experiments import maxtext_verdicts

TEXT = "the cat sat on the mat and the dog sat on the log . "  # repetitive: a model can learn it in a few steps


def write_arrayrecord(path: Path, texts: list[str]) -> None:
    """tf.train.Example records with a `text` feature, as MaxText's Grain pipeline parses them."""
    from array_record.python.array_record_module import ArrayRecordWriter
    from maxtext.input_pipeline.protos import example_pb2

    writer = ArrayRecordWriter(str(path), "group_size:1")
    for text in texts:
        example = example_pb2.Example()
        example.features.feature["text"].bytes_list.value.append(text.encode())
        writer.write(example.SerializeToString())
    writer.close()


def write_parquet(path: Path, texts: list[str], column: str = "text") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({column: texts}), str(path))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


# ---- translation and MaxText's validator ----


def test_data_options_translate_to_maxtexts_pipeline_keys():
    hf = build(compose("smoke", ["data=hf", "data.files=/d/*.parquet"]), "/r", "/r/m.jsonl").maxtext_args
    expected = {
        "dataset_type=hf",
        "hf_path=parquet",
        "hf_train_files='/d/*.parquet'",
        "tokenizer_type=huggingface",
        "tokenizer_path=qwen3-tokenizer",
        "train_data_columns=[text]",
        "grain_worker_count=1",
    }
    assert expected <= set(hf), hf
    grain = build(compose("smoke", ["data=grain", "data.files=/d/x*.arrayrecord", "data.column=body"]), "/r", "/r/m")
    args = grain.maxtext_args
    assert {"dataset_type=grain", "grain_file_type=arrayrecord", "tokenizer_type=sentencepiece"} <= set(args)
    assert "train_data_columns=[body]" in args
    # a column name cannot add YAML structure to MaxText's value
    odd = build(compose("smoke", ["data=grain", "data.files=/d/x", "data.column='a, b]: c'"]), "/r", "/r/m")
    assert "train_data_columns=['a, b]: c']" in odd.maxtext_args
    synthetic = build(compose("smoke"), "/r", "/r/m").maxtext_args
    assert not [a for a in synthetic if a.startswith(("hf_", "grain_", "tokenizer_", "train_data_columns"))]


def test_maxtext_accepts_the_data_options():
    cases = {
        "hf-parquet": ["experiment=smoke", "data=hf", "data.files=/d/*.parquet"],
        "hf-json": ["experiment=smoke", "data=hf", "data.format=json", "data.files=/d/*.jsonl"],
        "grain-arrayrecord": ["experiment=smoke", "data=grain", "data.files=/d/*.arrayrecord"],
        "grain-parquet": ["experiment=smoke", "data=grain", "data.format=parquet", "data.files=/d/*.parquet"],
        "grain-mixture": ["experiment=smoke", "data=grain", "data.files='/d/a*,0.7;/d/b*,0.3'"],
    }
    for case, overrides in cases.items():
        assert problems(compose(None, overrides)) == [], case
    assert maxtext_verdicts(cases) == dict.fromkeys(cases)


@pytest.mark.parametrize(
    "overrides, phrase",
    [
        (["data=hf"], "data.files is not set"),
        (["data=hf", "data.files=/d/x", "data.format=arrayrecord"], "fix: data=grain (it reads arrayrecord)"),
        (["data=hf", "data.files=/d/x", "data.tokenizer_type=sentencepiece"], "AutoTokenizer"),
        (["data=hf", "data.files=/d/x", "data.workers=2"], "at most 1 worker"),
        (["data=grain", "data.files=/d/x", "data.tokenizer_type=tiktoken"], "contains 'tiktoken'"),
        (
            ["hardware=h200", "model.attention=cudnn_flash_te", "data=grain", "data.files=/d/x"],
            "data.max_segments_per_seq=32",
        ),
        (
            ["hardware=h100", "maxtext.extra.attention=cudnn_flash_te", "data.max_segments_per_seq=4"],
            "the other tokens' attention output is zero",
        ),
    ],
)
def test_data_refusals_name_the_fix(overrides, phrase):
    found = [str(p) for p in problems(compose("smoke", overrides))]
    assert any(phrase in p for p in found), found


def test_te_attention_on_synthetic_rows_asks_for_one_segment():
    """Synthetic rows stay one segment each with TE's attention: the bound MaxText asks for is 1, never the 32 of
    packed files (docs/performance.md, "Attention parity"); one process per GPU needs none."""
    for attention in ("model.attention=cudnn_flash_te", "maxtext.extra.attention=cudnn_flash_te"):
        asked = [str(p) for p in problems(compose("smoke", ["hardware=h200", attention])) if "segment" in p.what]
        assert len(asked) == 1 and "data.max_segments_per_seq=1 (one segment" in asked[0], asked
        ok = problems(compose("smoke", ["hardware=h200", attention, "data.max_segments_per_seq=1"]))
        assert not [p for p in ok if "segment" in p.what], ok
    assert not [p for p in problems(compose("dsv3_blog", [])) if "segment" in p.what]


# ---- checks where the files are seen ----


def test_preflight_finds_what_is_wrong_with_the_files(tmp_path):
    write_parquet(tmp_path / "a.parquet", [TEXT] * 4, column="body")
    found, seen = data_preflight.problems(
        compose("smoke", ["data=grain", "data.format=parquet", f"data.files={tmp_path}/*.parquet", "data.workers=2"])
    )
    text = "\n".join(map(str, found))
    assert "no column 'text' (it has: body)" in text and "data.column=body" in text
    assert "data.workers=1" in text  # one file: MaxText refuses more grain workers than files per process
    assert seen.vocab == 32000 and seen.files == [str(tmp_path / "a.parquet")]
    missing, _ = data_preflight.problems(compose("smoke", ["data=grain", f"data.files={tmp_path}/none-*"]))
    assert any("no file matches" in str(p) for p in missing)


@pytest.mark.integration  # spawns the CLI
def test_too_large_a_tokenizer_stops_before_launch(tmp_path):
    write_parquet(tmp_path / "train-0.parquet", [TEXT] * 4)
    runs = tmp_path / "runs"
    proc = moekit("train", "experiment=smoke", "data=hf", f"data.files={tmp_path}/*.parquet", f"run.base_dir={runs}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "151,669 tokens but the model's vocabulary is 129,280" in proc.stderr
    assert "model.extra.vocab_size=151680" in proc.stderr and "Traceback" not in proc.stderr
    assert not runs.exists()


# ---- real training on the files ----


@pytest.mark.integration
def test_grain_arrayrecord_trains_and_loss_falls(tmp_path):
    """The smoke model, 30 steps on a repetitive text in ArrayRecord files (Grain, MaxText's llama2 tokenizer)."""
    for shard in range(2):
        write_arrayrecord(tmp_path / f"train-{shard}.arrayrecord", [TEXT * 8] * 64)
    run = tmp_path / "run"
    proc = moekit(
        "train",
        "experiment=smoke",
        "data=grain",
        f"data.files={tmp_path}/*.arrayrecord",
        "train.steps=30",
        "train.learning_rate=1e-3",
        f"run.dir={run}",
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (
        "moekit: data: 2 arrayrecord file(s), column 'text'; tokenizer tokenizer.llama2 (32,000 tokens)" in proc.stdout
    )
    args = json.loads((run / "job.json").read_text())["maxtext_args"]
    assert {"dataset_type=grain", "grain_file_type=arrayrecord", "tokenizer_path=tokenizer.llama2"} <= set(args)
    loss = losses(run)
    assert len(loss) == 30
    assert loss[-1] < 0.6 * loss[0], loss  # synthetic data would not fall like this: the text is learned


@pytest.mark.soak
@pytest.mark.integration
def test_two_processes_read_different_shards(tmp_path):
    """Hugging Face pipeline, 8 parquet shards, 2 processes: each process's pipeline logs the shards it moves
    through (MaxText's HFDataSource), and the two sets are disjoint: process p reads shards p, p+2, p+4, ..."""
    for shard in range(8):
        write_parquet(tmp_path / f"train-{shard:05d}-of-00008.parquet", [f"{TEXT * 12} shard {shard}"] * 4)
    run = tmp_path / "run"
    proc = moekit(
        "train",
        "experiment=smoke",
        "data=hf",
        f"data.files={tmp_path}/*.parquet",
        "data.workers=0",
        "model.extra.vocab_size=151680",
        "train.steps=6",
        "train.per_device_batch_size=1",
        "cluster.processes_per_node=2",
        f"cluster.coordinator_port={free_port()}",
        f"run.dir={run}",
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    read = {}
    for process, log in ((0, "maxtext.log"), (1, "maxtext.1.log")):
        text = (run / log).read_text()
        moves = re.findall(rf"Updating host {process} dataset 0, was on shard (\d+)", text)
        read[process] = {int(s) for s in moves} | {int(s) for s in re.findall(r"New shard is (\d+)", text)}
    assert len(read[0]) >= 2 and len(read[1]) >= 2, read  # each moved past its first shard
    assert read[0].isdisjoint(read[1]), read
    assert all(s % 2 == 0 for s in read[0]) and all(s % 2 == 1 for s in read[1]), read
    assert len(losses(run)) == 6


def test_cudnn_flash_jax_on_packed_rows_is_named_before_launch():
    """It takes no segment ids: packed documents see each other (a warning: a causal model over the whole row)."""
    from moekit.config.checks import warnings

    def named(overrides):
        return [str(w) for w in warnings(compose("smoke", ["hardware=h200", *overrides])) if "segment ids" in w.what]

    assert named(["maxtext.extra.attention=cudnn_flash_jax", "data=grain", "data.files=/d/x"])
    assert named(["model.attention=cudnn_flash_jax", "data.max_segments_per_seq=3"])
    assert not named(["model.attention=cudnn_flash_jax"])  # synthetic rows of one segment
    assert not named(["model.attention=cudnn_flash_jax", "data=grain", "data.files=/d/x", "data.packing=false"])
