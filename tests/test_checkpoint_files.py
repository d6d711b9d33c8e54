"""What `moekit checkpoint import|export` reads and writes, checked before any conversion (no torch needed).

The checkpoints here are made with safetensors' numpy API: a tiny Qwen3-MoE config.json and, for every tensor
MaxText's mapping reads, an array of the shape MaxText's HF_SHAPE gives for that config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import moekit
from moekit.checkpoint.convert import files, target
from moekit.checkpoint.model import hf
from moekit.checkpoint.model.hf_config import ConfigJsonError, checked
from moekit.config.kinds.families import FAMILIES

TINY_QWEN3 = {
    "model_type": "qwen3_moe",
    "num_hidden_layers": 2,
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "intermediate_size": 64,
    "vocab_size": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "norm_topk_prob": True,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


def tiny_checkpoint(folder: Path, config: dict | None = None, seed: int = 3) -> dict[str, np.ndarray]:
    """A complete Hugging Face checkpoint of `config` (random float32 tensors of HF_SHAPE's shapes)."""
    from maxtext.checkpoint_conversion.utils.hf_shape import HF_SHAPE
    from safetensors.numpy import save_file

    config = config or TINY_QWEN3
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors = {
        name: (rng.standard_normal(shape) * 0.05).astype(np.float32)
        for name, shape in HF_SHAPE[hf.MAPPING_KEYS[config["model_type"]]](config).items()
    }
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))
    return tensors


# ---- config.json: every value moekit reads is in range before anything is sized by it ----


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[1, 2, 3]", "JSON list, not an object"),
        ('{"model_type": "qwen3_moe", "num_hidden_layers": 2', "not valid JSON"),
        (b"\xff\xfe{}".decode("latin-1"), "not valid JSON"),
        (json.dumps(TINY_QWEN3 | {"num_experts": 3.5e15}), "num_experts is 3500000000000000.0"),
        (json.dumps(TINY_QWEN3 | {"num_hidden_layers": "two"}), "num_hidden_layers is 'two'"),
        (json.dumps(TINY_QWEN3 | {"hidden_size": -64}), "hidden_size is -64"),
        (json.dumps(TINY_QWEN3 | {"num_experts_per_tok": True}), "num_experts_per_tok is True"),
        (json.dumps({k: v for k, v in TINY_QWEN3.items() if k != "moe_intermediate_size"}), "no moe_intermediate_size"),
        (json.dumps(TINY_QWEN3 | {"rope_scaling": "yarn"}), "rope_scaling is str"),
        (json.dumps(TINY_QWEN3 | {"mlp_only_layers": list(range(9))}), "mlp_only_layers: a list of at most"),
        (json.dumps(TINY_QWEN3 | {"rms_norm_eps": None, "rope_theta": "NaN"}), "rope_theta is 'NaN'"),
        (json.dumps(TINY_QWEN3 | {"model_type": 7}), "model_type 7"),
        (json.dumps({"text_config": [TINY_QWEN3]}), "text_config is a list"),
        ("[" * 200_000, "nested deeper than"),
    ],
)
def test_a_malformed_config_json_is_refused_by_name(tmp_path, text, named):
    (tmp_path / "config.json").write_text(text, encoding="latin-1")
    with pytest.raises((ConfigJsonError, hf.CheckpointError)) as e:
        files.read(tmp_path)
    assert named in str(e.value) and "config.json" in str(e.value)


def test_a_config_json_of_any_size_is_read_within_a_bound(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_QWEN3 | {"pad": "x" * (files.CONFIG_BYTES + 10)}))
    with pytest.raises(hf.CheckpointError, match="holds more than .* bytes, the most moekit reads for a config.json"):
        files.read(tmp_path)


def test_counts_the_tensors_cannot_back_are_refused_before_the_shape_table(tmp_path):
    """Counts within the per-key bounds whose product the headers never back (5000 x 9000 experts for 3 tensors):
    refused at once, in a process that may not grow past 2 GiB (the old shape table grew without bound)."""
    (tmp_path / "config.json").write_text(json.dumps(TINY_QWEN3 | {"num_hidden_layers": 4000, "num_experts": 9000}))
    code = f"""
import json, resource
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
from moekit.checkpoint.model import hf
from moekit.checkpoint.model.hf_config import checked
config = checked(json.loads(Path("{tmp_path}/config.json").read_text()))
ckpt = hf.HfCheckpoint(Path("{tmp_path}"), config, tensors={{f"t{{i}}": ((1,), "F32") for i in range(3)}})
try:
    hf.shape_check(ckpt, "qwen3-30b-a3b")
except Exception as e:
    print(type(e).__name__, e)
"""
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "ConfigJsonError" in p.stdout and "at least 36,000,000 tensors" in p.stdout, p.stdout
    assert time.monotonic() - start < 60


def test_a_huge_count_ends_in_one_line_before_anything_is_sized(tmp_path):
    tiny_checkpoint(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps(TINY_QWEN3 | {"num_experts": 7e22}))
    p = moekit("checkpoint", "import", "--family", "qwen3_30b_a3b", str(tmp_path / "hf"), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "num_experts is 7e+22" in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()


def test_the_per_expert_mappings_are_maxtexts():
    """PER_EXPERT says which of MaxText's shape tables name each expert's tensors apart (bound_by_tensors relies on
    it): more experts give more names exactly there."""
    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS
    from maxtext.checkpoint_conversion.utils.hf_shape import HF_SHAPE

    for key in hf.MAPPING_KEYS.values():
        c = HF_MODEL_CONFIGS[key].to_dict() | {"num_hidden_layers": 4}
        counts = []
        for n in (8, 16):
            c2 = dict(c)
            for k in ("n_routed_experts", "num_local_experts", "num_experts"):
                if k in c2:
                    c2[k] = n
            counts.append(len(HF_SHAPE[key](c2)))
        assert (counts[1] > counts[0]) == (key in hf.PER_EXPERT), key


# ---- the safetensors files: one source per tensor, damaged files named ----


def test_a_second_file_holding_a_tensor_of_the_same_name_is_refused_naming_both(tmp_path):
    from safetensors.numpy import save_file

    tensors = tiny_checkpoint(tmp_path)
    name = "model.layers.1.post_attention_layernorm.weight"
    save_file({name: np.full_like(tensors[name], 3.25)}, str(tmp_path / "zz-leftover.safetensors"))
    with pytest.raises(hf.CheckpointError) as e:
        files.read(tmp_path)
    assert name in str(e.value) and "model.safetensors" in str(e.value) and "zz-leftover.safetensors" in str(e.value)


def test_the_index_decides_which_file_a_tensor_comes_from(tmp_path):
    from safetensors.numpy import save_file

    tensors = tiny_checkpoint(tmp_path)
    name = "model.norm.weight"
    save_file({name: np.full_like(tensors[name], -2.0)}, str(tmp_path / "stale.safetensors"))
    index = {"metadata": {}, "weight_map": {k: "model.safetensors" for k in tensors}}
    (tmp_path / files.INDEX).write_text(json.dumps(index))
    ckpt = files.read(tmp_path)
    assert ckpt.sources[name].name == "model.safetensors" and ckpt.files == [tmp_path / "model.safetensors"]
    index["weight_map"]["model.extra.weight"] = "model.safetensors"
    (tmp_path / files.INDEX).write_text(json.dumps(index))
    with pytest.raises(hf.CheckpointError, match="model.extra.weight is in model.safetensors by the index"):
        files.read(tmp_path)


@pytest.mark.parametrize("damage", ["empty", "cut", "garbage"])
def test_an_empty_cut_or_damaged_shard_is_named(tmp_path, damage):
    tiny_checkpoint(tmp_path)
    shard = tmp_path / "model-00002-of-00002.safetensors"
    data = (tmp_path / "model.safetensors").read_bytes()
    shard.write_bytes(
        {"empty": b"", "cut": data[: len(data) // 3], "garbage": b"\x10\0\0\0\0\0\0\0" + b"{" * 16}[damage]
    )
    with pytest.raises(hf.CheckpointError) as e:
        files.read(tmp_path)
    assert str(shard) in str(e.value) and "not a complete safetensors file" in str(e.value)


def test_a_cut_shard_is_refused_on_the_command_line_without_a_traceback(tmp_path):
    tiny_checkpoint(tmp_path / "hf")
    f = tmp_path / "hf" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    p = moekit("checkpoint", "import", "--family", "qwen3_30b_a3b", str(tmp_path / "hf"), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and str(f) in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]


def test_another_family_is_refused_with_the_option_to_import_it_with(tmp_path):
    """A DeepSeek-V3 checkpoint given --family mixtral_tiny: the refusal names the option its model_type imports as."""
    from moekit.config.kinds.families import _TINY_DEEPSEEK3

    tiny_checkpoint(tmp_path / "hf", dict(_TINY_DEEPSEEK3))
    p = moekit("checkpoint", "import", "--family", "mixtral_tiny", str(tmp_path / "hf"), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "family mismatch: the checkpoint is deepseek_v3" in p.stderr, p.stderr[-2000:]
    assert "fix: --family deepseek3_671b (the model option for deepseek_v3" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "o").exists()


# ---- the folder beside --out: never deleted, never written through ----


def test_a_partial_folder_holding_the_users_files_is_kept(tmp_path):
    out = tmp_path / "mine"
    (tmp_path / "mine.partial").mkdir()
    (tmp_path / "mine.partial" / "notes.txt").write_text("keep me")
    with pytest.raises(hf.CheckpointError, match="moekit did not make it"):
        with target.writing(out, "export"):
            pass
    assert (tmp_path / "mine.partial" / "notes.txt").read_text() == "keep me" and not out.exists()


def test_a_partial_folder_that_is_a_link_is_not_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "ckpt.partial").symlink_to(elsewhere)
    with pytest.raises(hf.CheckpointError, match="is a symbolic link"):
        with target.writing(tmp_path / "ckpt", "import") as tmp:
            (tmp / "x").write_text("")
    assert list(elsewhere.iterdir()) == []


def test_a_leftover_of_moekit_is_replaced_and_a_failed_write_leaves_nothing(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(RuntimeError):
        with target.writing(out, "export") as tmp:
            (tmp / "half").write_text("")
            raise RuntimeError("conversion failed")
    assert not target.partial(out).exists()
    target.partial(out).mkdir()
    (target.partial(out) / target.MARKER).write_text("")
    with target.writing(out, "export") as tmp:
        (tmp / "model.safetensors").write_text("")
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]


def test_export_refuses_its_out_before_loading_anything(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    p = moekit("checkpoint", "export", str(tmp_path / "no-such-checkpoint"), "--out", str(out))
    assert p.returncode == 2 and f"{out} exists" in p.stderr, p.stderr[-2000:]
    link = tmp_path / "fresh.partial"
    link.symlink_to(tmp_path)
    p = moekit("checkpoint", "export", str(tmp_path / "no-such-checkpoint"), "--out", str(tmp_path / "fresh"))
    assert p.returncode == 2 and "is a symbolic link" in p.stderr, p.stderr[-2000:]


@pytest.mark.skipif(os.access("/sys", os.W_OK) and os.geteuid() != 0, reason="needs a folder nobody may write")
def test_an_out_nobody_can_write_fails_before_the_conversion(tmp_path):
    """/sys takes no new folder, not even from root: the write is tried before the checkpoint is converted."""
    tiny_checkpoint(tmp_path / "hf")
    start = time.monotonic()
    p = moekit("checkpoint", "import", "--family", "qwen3_30b_a3b", str(tmp_path / "hf"), "--out", "/sys/moekit-ckpt")
    assert p.returncode == 2 and "cannot write /sys/moekit-ckpt.partial" in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "MaxText parameters" not in p.stderr
    assert time.monotonic() - start < 300


def test_checked_keeps_a_good_config():
    assert checked(TINY_QWEN3) == TINY_QWEN3
    assert checked({"text_config": TINY_QWEN3}) == TINY_QWEN3


def test_every_published_config_of_a_family_passes_the_checks():
    """The bounds refuse no real model: MaxText's copies of the published config.json of each family pass."""
    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

    for key in hf.MAPPING_KEYS.values():
        config = HF_MODEL_CONFIGS[key].to_dict()
        assert checked(config)["num_hidden_layers"] == config["num_hidden_layers"], key


def test_a_relative_init_from_is_refused_before_launch_with_the_absolute_form(tmp_path, monkeypatch):
    """Orbax refuses a relative path only once MaxText has started and compiled (the first train from an import
    with a relative --out did): refused by the host probe, whose fix names the absolute path."""
    from conftest import compose
    from moekit.preflight import checkpoint as checkpoint_preflight

    monkeypatch.chdir(tmp_path)
    (problem,), _ = checkpoint_preflight.problems(compose("smoke", ["checkpoint.init_from=imports/tiny"]))
    assert "is a relative path" in problem.what and problem.fix == f"checkpoint.init_from={tmp_path}/imports/tiny"


def test_a_record_with_an_impossible_count_is_not_read_by_the_host_probe(tmp_path):
    """moekit-import.json is a file too: its config's counts are checked before from_hf reads them (which would
    build a layer list of any length a record names, or stop with a ValueError on one that is no number)."""
    from conftest import compose
    from moekit.preflight import checkpoint as checkpoint_preflight

    folder = tmp_path / "ckpt"
    (folder / "0" / "items").mkdir(parents=True)
    record = {"family": "qwen3_30b_a3b", "overrides": [], "mapping": "qwen3-30b-a3b"}
    for layers, said in (("many", "num_hidden_layers is 'many'"), (10**8, "num_hidden_layers is 100,000,000")):
        hf_config = TINY_QWEN3 | {"num_hidden_layers": layers}
        (folder / "moekit-import.json").write_text(json.dumps(record | {"hf_config": hf_config}))
        problems, notes = checkpoint_preflight.problems(compose("smoke", [f"checkpoint.init_from={folder}"]))
        assert problems == [] and said in " ".join(notes)


@pytest.mark.parametrize("option", sorted({f.tiny for f in FAMILIES.values()} | {"deepseek3_tiny"}))
def test_a_run_of_each_family_has_a_config_json_for_its_export(option):
    """Export of a run's checkpoint writes config.json from the run's keys (architecture.to_hf on the family's
    published config): read back, it is the run's model, key by key, for every family MaxText can convert."""
    from conftest import compose
    from moekit.base.maxtext_files import model_values
    from moekit.checkpoint.convert.orbax import published_config
    from moekit.checkpoint.model.architecture import from_hf, from_maxtext, hf_model_type
    from moekit.plan import resolved_values

    cfg = compose("smoke", [f"model={option}"])
    values = resolved_values(cfg, *model_values(cfg.model.name))
    kind = hf_model_type(values)
    if kind in hf.NO_MAPPING:
        # Nothing to export: the reason holds (MaxText's own table maps no model of this family).
        from maxtext.checkpoint_conversion.utils.param_mapping import PARAM_MAPPING

        family = kind.removesuffix("_text")
        assert [k for k in PARAM_MAPPING if k.startswith(family)] == [], f"MaxText maps {family} now: add its mapping"
        return
    config = published_config(values, hf.MAPPING_KEYS[kind])
    assert from_hf(checked(config)) == from_maxtext(values) and config["model_type"] == kind
