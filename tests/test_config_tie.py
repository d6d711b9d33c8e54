"""Every full-size model moekit composes is the published model: each architectural value equal, or named.

Ours: the keys MaxText runs with (base.yml < MaxText's model file < moekit's arguments), read by
moekit.checkpoint.model.architecture.from_maxtext. Published: MaxText 0.2.5's copies of the Hugging Face configs
(maxtext/checkpoint_conversion/utils/hf_model_configs.py, HF_MODEL_CONFIGS[model name]: transformers config
objects), and for Llama 4, which MaxText has no copy of, the values of Meta's config.json written below with
their source; both read by from_hf. A difference kept on purpose is a line of docs/adapting.md's "kept
differences" list (model option, key, reason); the test reads that list, and an entry that no longer differs fails.
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO, compose, moekit
from moekit.base.maxtext_files import model_values
from moekit.checkpoint.model.architecture import differences, from_hf, from_maxtext
from moekit.config import checks
from moekit.config.kinds.families import FAMILIES
from moekit.config.schema import GPU_FACTS
from moekit.plan import resolved_values

FULL_SIZE = [p.option for f in FAMILIES.values() for p in f.full_size]  # the family rows name them

# Meta's Llama 4 text_config values, each with where it was checked. meta-llama's Hugging Face repositories are gated,
# so the values are read from public copies of them and from the script that wrote them:
#   [convert] transformers' converter that wrote Meta's config.json files (write_model: intermediate_size=8192,
#             intermediate_size_mlp=16384, vocab_size=202048, tie_word_embeddings=False, rope_theta/norm_eps/heads/
#             layers/experts from Meta's params.json; max_context_length: "256K for base, 1M for 128E instruct, 10M for
#             16E instruct"): https://github.com/huggingface/transformers/blob/main/src/transformers/models/llama4/convert_llama4_weights_to_hf.py
#   [scout]   torchprime's scaled-down copy of the base Scout config.json (widths, layers and vocabulary scaled down;
#             it keeps max_position_embeddings 262144, rope factor 16 / low 1 / high 1, rope_theta, rms_norm_eps, silu,
#             attention_bias false, use_qk_norm true, attn_temperature_tuning true, attention_chunk_size 8192,
#             interleave_moe_layer_step 1, 16 experts, top-1, intermediate_size_mlp 16384):
#             https://github.com/AI-Hypercomputer/torchprime/blob/main/torchprime/torch_xla_models/configs/model/llama-4-text-only-dummy.yaml
#   [maverick] TensorRT-LLM's copy of the Maverick (Instruct) text_config, layers "reduced to 2 from 48" and
#             no_rope_layer_interval changed to 2 there (hidden 5120, 40/8 heads, head_dim 128, 8192/16384, 128 experts,
#             top-1, interleave_moe_layer_step 2, use_qk_norm false, rope_scaling null, rope_theta 500000, rms_norm_eps
#             1e-05, vocab 202048, attention_chunk_size 8192, silu, attention_bias false):
#             https://github.com/NVIDIA/TensorRT-LLM/blob/main/tests/unittest/_torch/modeling/test_modeling_llama_min_latency.py
_LLAMA4_COMMON = {
    "model_type": "llama4_text",
    "hidden_size": 5120,  # [maverick]
    "intermediate_size": 8192,  # each routed expert and the shared expert; [convert], [maverick]
    "intermediate_size_mlp": 16384,  # the dense layers' FFN; [convert], [scout], [maverick]
    "num_hidden_layers": 48,  # [maverick] ("reduced to 2 layers from 48")
    "num_attention_heads": 40,  # [maverick]
    "num_key_value_heads": 8,  # [maverick]
    "head_dim": 128,  # [maverick]
    "num_experts_per_tok": 1,  # [scout], [maverick]
    "vocab_size": 202048,  # [convert], [maverick]
    "rms_norm_eps": 1e-05,  # [scout], [maverick]
    "hidden_act": "silu",  # [scout], [maverick]
    "attention_bias": False,  # [scout], [maverick]
    "tie_word_embeddings": False,  # [convert] ("Constant set to False")
    "attention_chunk_size": 8192,  # [scout], [maverick]
    # Every 4th layer NoPE (config.json lists them as no_rope_layers, 1 = RoPE): [convert] takes the interval from
    # Meta's params.json (nope_layer_interval), not seen here; [scout]'s 2 layers are both RoPE, as interval 4 gives.
    # No public copy of the full 48-entry list was found; 4 is also transformers' default.
    "no_rope_layer_interval": 4,
    # [scout] true; not in [maverick]'s copy, which then loads with transformers' default, true.
    "attn_temperature_tuning": True,
    "rope_theta": 500000.0,  # [scout], [maverick]
}
# Published: text_config of https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json (the base
# model; the Instruct release has max_position_embeddings 10485760, [convert]).
LLAMA4_SCOUT = _LLAMA4_COMMON | {
    "num_local_experts": 16,  # [scout]
    "interleave_moe_layer_step": 1,  # [scout]
    "use_qk_norm": True,  # [scout]
    "max_position_embeddings": 262144,  # [scout], [convert] (256K for a base model)
    "rope_scaling": {  # [scout]; original_max_position_embeddings 8192: [convert]'s constant, not in [scout]'s copy
        "rope_type": "llama3",
        "factor": 16.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
    },
}
# Published: text_config of https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E/blob/main/config.json (the
# base model). No public copy of the base config.json was found: the values are [maverick]'s copy of the Instruct
# release, except max_position_embeddings, which [convert] gives as 256K for a base model (the Instruct's 1048576).
LLAMA4_MAVERICK = _LLAMA4_COMMON | {
    "num_local_experts": 128,  # [maverick]
    "interleave_moe_layer_step": 2,  # [maverick]
    "use_qk_norm": False,  # [maverick]
    "max_position_embeddings": 262144,  # [convert]
    "rope_scaling": None,  # [maverick]
}


def published(option: str, model_name: str) -> dict:
    """The published config of a full-size option, as a dict."""
    if option == "llama4_scout":
        return LLAMA4_SCOUT
    if option == "llama4_maverick":
        return LLAMA4_MAVERICK
    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

    return HF_MODEL_CONFIGS[model_name].to_dict()


KEPT = re.compile(r"^- `(?P<option>\w+)` `(?P<key>\w+)`: (?P<reason>.+)$")


def kept_differences() -> dict[tuple[str, str], str]:
    """(option, key) -> reason, from docs/adapting.md's kept-differences list."""
    text = (REPO / "docs" / "adapting.md").read_text(encoding="utf8")
    block = text.split("<!-- BEGIN kept differences -->")[1].split("<!-- END kept differences -->")[0]
    out = {}
    for line in block.strip().splitlines():
        m = KEPT.match(line)
        assert m, f"docs/adapting.md kept differences: not '- `option` `key`: reason': {line!r}"
        out[(m["option"], m["key"])] = m["reason"]
    return out


def ours_and_published(option: str) -> tuple[dict, dict]:
    cfg = compose("smoke", [f"model={option}"])
    ours = from_maxtext(resolved_values(cfg, *model_values(cfg.model.name)))
    return ours, from_hf(published(option, cfg.model.name))


@pytest.mark.parametrize("option", FULL_SIZE)
def test_full_size_model_is_the_published_one(option):
    ours, pub = ours_and_published(option)
    assert set(ours) == set(pub), "both sides read the same keys"
    kept = {key for (o, key) in kept_differences() if o == option}
    unexplained = {k: d for k, d in differences(ours, pub).items() if k not in kept}
    assert not unexplained, f"{option}: (ours, published) differ, not listed in docs/adapting.md: {unexplained}"


def test_every_kept_difference_still_differs():
    for (option, key), reason in kept_differences().items():
        assert option in FULL_SIZE, option
        ours, pub = ours_and_published(option)
        assert key in differences(ours, pub), f"{option} {key} is listed as kept but equals the published value"
        assert len(reason) > 20, reason


def test_the_tie_reads_what_it_compares():
    """The comparison can fail: a width, the routing and a rope value each change the architecture it reads."""
    ours, pub = ours_and_published("mixtral_8x7b")
    assert not differences(ours, pub)
    cfg = compose("smoke", ["model=mixtral_8x7b", "model.routing.routed_score_func=sigmoid"])
    v = resolved_values(cfg, *model_values(cfg.model.name))
    assert "score" in differences(from_maxtext(v), pub)
    base = resolved_values(compose("smoke", ["model=mixtral_8x7b"]), *model_values("mixtral-8x7b"))
    assert set(differences(from_maxtext(base | {"base_emb_dim": 4095}), pub)) == {"hidden"}
    other_rope = published("mixtral_8x7b", "mixtral-8x7b") | {"rope_parameters": None, "rope_theta": 1e4}
    assert set(differences(ours, from_hf(other_rope))) == {"rope_theta"}


# ---- a hardware generation is one row ----

HARDWARE = sorted(p.stem for p in (REPO / "conf" / "hardware").glob("*.yaml"))
DATA = REPO / "src" / "moekit" / "data"


def test_every_gpu_row_states_every_fact_once():
    """Each GPU row carries peaks, HBM size and bandwidth, NVLink domain, link classes, host memory and their sources;
    links.yaml holds only the link classes (each named by some row) and forecast.yaml no hardware facts."""
    links = yaml.safe_load((DATA / "links.yaml").read_text())
    assert set(links) == {"links"}, "per-generation facts belong in conf/hardware/<option>.yaml"
    assert "hardware" not in yaml.safe_load((DATA / "forecast.yaml").read_text())
    named = set()
    for option in HARDWARE:
        hw = compose("smoke", [f"hardware={option}"]).hardware
        assert hw.name == option and hw.peak_source
        if hw.platform == "gpu":
            assert all(getattr(hw, k) for k in GPU_FACTS), option
            assert hw.peak_tflops.bf16 and (hw.peak_tflops.fp8 or not hw.features.fp8), option
            named |= set(hw.links.model_dump().values())
    assert named == set(links["links"]), "a link class no generation has"
    assert all(e["gb_per_s"] > 0 and e["source"] for e in links["links"].values())


def test_no_module_names_a_gpu_generation():
    """Code reads a row's facts, never its name: a new row needs no code."""
    quoted = [f"{q}{h}{q}" for h in HARDWARE if h != "cpu" for q in "'\""]
    for path in (REPO / "src" / "moekit").rglob("*.py"):
        text = path.read_text()
        assert not [q for q in quoted if q in text], path


def _tree_with(tmp_path: Path, option: str, text: str) -> dict[str, str]:
    """A copy of conf/ with hardware/<option>.yaml added: what a user adding a generation has."""
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "hardware" / f"{option}.yaml").write_text(text)
    return {"MOEKIT_CONF_DIR": str(conf)}


def _row(source: str, name: str, drop: tuple[str, ...] = (), **swap: str) -> str:
    lines = (REPO / "conf" / "hardware" / f"{source}.yaml").read_text().splitlines()
    lines = [f"name: {name}" if ln.startswith("name:") else ln for ln in lines if not ln.startswith(drop)]
    text = "\n".join(lines) + "\n"
    for old, new in swap.items():
        text = text.replace(old, new)
    return text


def test_a_generation_without_its_facts_is_refused_naming_its_row(tmp_path):
    """A row written the way rows were before (peaks, memory, env, but no bandwidth, links or host) is refused
    before anything is planned, naming the file and what it lacks."""
    env = _tree_with(tmp_path, "b300", _row("b200", "b300", drop=("hbm_tb_per_s", "links", "host_")))
    proc = moekit("plan", "experiment=smoke", "hardware=b300", env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "conf/hardware/b300.yaml" in proc.stderr
    assert all(k in proc.stderr for k in ("hbm_tb_per_s", "links", "host_gib_per_gpu")), proc.stderr


def test_a_row_naming_an_unknown_link_class_is_refused_naming_the_link_table(tmp_path):
    env = _tree_with(tmp_path, "r100", _row("gb300", "r100", **{"scale_up: nvlink5": "scale_up: nvlink6"}))
    proc = moekit("plan", "experiment=smoke", "hardware=r100", env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "nvlink6" in proc.stderr and "links.yaml" in proc.stderr


def test_a_complete_row_is_all_a_new_generation_needs(tmp_path):
    """One file: the forecast and the no-overhead bound read the new row (here its HBM bandwidth, a quarter of
    GB200's, slows the memory-bound part)."""
    env = _tree_with(tmp_path, "b300", _row("gb200", "b300", **{"hbm_tb_per_s: 8.0": "hbm_tb_per_s: 2.0"}))
    plans = {}
    for option in ("b300", "gb200"):
        proc = moekit("plan", "experiment=smoke", f"hardware={option}", "--format", "json", env=env)
        assert proc.returncode == 0, proc.stderr
        plans[option] = json.loads(proc.stdout)
    assert plans["b300"]["hardware"] == "b300" and "step" in plans["b300"]
    parts = {o: {p["name"]: p["seconds"] for p in plans[o]["forecast"]["parts"]} for o in plans}
    assert parts["b300"]["other compute"] > 2 * parts["gb200"]["other compute"]
    assert parts["b300"]["other GEMMs"] == pytest.approx(parts["gb200"]["other GEMMs"])


@pytest.mark.parametrize(
    "override",
    [
        "hardware.peak_tflops.fp8=-40",
        "hardware.hbm_gib=0",
        "hardware.hbm_tb_per_s=-2.5",
        "hardware.host_gib_per_gpu=nan",
    ],
)
def test_a_row_value_no_gpu_has_is_refused(override):
    proc = moekit("plan", "experiment=smoke", "hardware=h200", override)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert override.split("=")[0] in proc.stderr


# ---- each check is registered once ----

TOPICS = [m for m in vars(checks).values() if inspect.ismodule(m) and m.__name__.startswith("moekit.config.checks.")]


def test_every_check_is_registered_once_with_the_jobs_it_judges():
    """REGISTRY is the one list (CHECKS and TRAINING_ONLY are read from it): every check a topic module defines is in
    it or in WARNINGS exactly once (numbers_in_range runs before them all)."""
    defined = {
        fn
        for m in TOPICS
        for fn in vars(m).values()
        if inspect.isfunction(fn)
        and fn.__module__ == m.__name__
        and not fn.__name__.startswith("_")
        and list(inspect.signature(fn).parameters) == ["cfg"]
        and "Iterator[Problem]" in str(fn.__annotations__)
    }
    registered = [fn for fn, _ in checks.REGISTRY] + checks.WARNINGS
    assert len(registered) == len(set(registered))
    assert set(registered) | {checks.text.numbers_in_range} == defined
    assert {runs for _, runs in checks.REGISTRY} == {checks.TRAINING, checks.EVERY_JOB}
