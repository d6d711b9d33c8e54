"""The MoE families beyond DeepSeek-V3: faithful model options, family-aware refusals, the shared ladder, and the
tiny variants training on CPU."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO, compose, losses, moekit
from moekit.base.errors import ConfigError
from moekit.base.maxtext_files import model_values
from moekit.checkpoint.model.architecture import HF_FAMILIES
from moekit.config.checks import problems
from moekit.config.checks.compute import QUANTIZED_MULTIPLE
from moekit.config.compose import group_options
from moekit.config.kinds.families import FAMILIES
from moekit.plan import resolved_values
from moekit.plan.model import Dims
from name_compares import compared
from test_experiments import maxtext_verdicts

_SPEC = importlib.util.spec_from_file_location("families_docs", REPO / "scripts" / "families_docs.py")
families_docs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(families_docs)
CONF = REPO / "conf"
MODELS = group_options("model")
LADDER = group_options("ladder")
TE_RUNG = "5_nccl_ep"  # the ladder's rung onto TE's MoE block (moe=te), which some families cannot run
# Each family's layout experiments -> the rungs moekit refuses, with the reason its row gives (kinds/families.py).
LAYOUTS = {
    lay.experiment: ({TE_RUNG: f.te_moe_block} if f.te_moe_block else {})
    for f in FAMILIES.values()
    for lay in f.layouts
}
# ... and the low-precision rungs before TE's block where the router's quantized GEMM cannot compile (too few experts).
for _e, _refused in LAYOUTS.items():
    if compose(_e).model.num_experts % QUANTIZED_MULTIPLE:
        _refused |= {r: "quantizes the router's GEMM" for r in LADDER if "3" <= r[0] < TE_RUNG[0]}
TINY = [f.tiny for f in FAMILIES.values()]


# ---- the family table (config/kinds/families.py) names the families everywhere they must be ----


def test_the_schema_choices_are_the_rows():
    """schema.DecoderBlock is read from the rows: a block not in them is refused, and the refusal names the rows'
    blocks and no other."""
    with pytest.raises(ConfigError) as refused:
        compose("smoke", ["model.decoder_block=nosuch"])
    choices = re.search(r"model\.decoder_block: Input should be (.*) \(got 'nosuch'\)", str(refused.value))
    assert choices, str(refused.value)
    assert sorted(re.findall(r"'(\w+)'", choices.group(1))) == sorted(FAMILIES)


def test_every_model_option_is_of_a_family_and_every_family_has_its_files():
    blocks = {m: compose("smoke", [f"model={m}"]).model.decoder_block for m in MODELS}
    assert set(blocks.values()) == set(FAMILIES)
    # Each option is named once by its family's row: the tiny one, a reduced one, or a published full-size model.
    options = {f.decoder_block: (f.tiny, *f.reduced, *(p.option for p in f.full_size)) for f in FAMILIES.values()}
    named = [(o, block) for block, opts in options.items() for o in opts]
    assert sorted(o for o, _ in named) == sorted(MODELS), "a conf/model option missing from (or extra in) the rows"
    assert dict(named) == blocks
    experiments = group_options("experiment")
    for f in FAMILIES.values():
        assert blocks.get(f.tiny) == f.decoder_block, f.decoder_block
        assert f.layouts and {lay.experiment for lay in f.layouts} <= set(experiments), f.decoder_block
        assert all(compose(lay.experiment).model.decoder_block == f.decoder_block for lay in f.layouts), f.decoder_block
        # Every full-size option runs on exactly one of the family's layouts; each layout names a tiny option of it.
        assert sorted(o for lay in f.layouts for o in lay.options) == sorted(p.option for p in f.full_size)
        assert all(lay.tiny in (f.tiny, *f.reduced) and blocks[lay.tiny] == f.decoder_block for lay in f.layouts)


def test_every_layout_has_its_one_gpu_proxy():
    """Each layout of a row names its proxy experiment (the per-GPU share test_proxies_keep_the_layouts_per_gpu_experts
    checks): its file exists and it runs the family on one GPU."""
    experiments = group_options("experiment")
    for f in FAMILIES.values():
        for lay in f.layouts:
            assert lay.proxy in experiments, f"{lay.experiment}: conf/experiment/{lay.proxy}.yaml is missing"
            cfg = compose(lay.proxy)
            assert (cfg.model.decoder_block, cfg.num_devices) == (f.decoder_block, 1), lay.proxy


def test_the_adapting_guide_has_a_line_per_layout():
    """docs/adapting.md's family table is what scripts/families_docs.py writes from the rows (`make docs`)."""
    assert families_docs.main(["--check"]) == 0, "run `make docs` and commit docs/adapting.md"
    table = (REPO / "docs" / "adapting.md").read_text().split(families_docs.BEGIN)[1].split(families_docs.END)[0]
    for f in FAMILIES.values():
        assert all(f"| {lay.model} (`{f.decoder_block}`) |" in table for lay in f.layouts), f.decoder_block


def test_the_hugging_face_side_is_the_rows():
    """Each row names its Hugging Face model types; each entry that MaxText can convert has its parity reference (a
    name, a tiny config of its model_type, the full-size option it is imported as); architecture.from_hf reads
    each entry's model_type."""
    from moekit.checkpoint.model.architecture import from_hf

    assert [f.decoder_block for f in FAMILIES.values() if not f.hf] == [], "a row without its Hugging Face side"
    hf = [(h, f) for f in FAMILIES.values() for h in f.hf]
    assert len(HF_FAMILIES) == len(hf), "a model_type named by two entries"
    assert len({h.tiny for h, _ in hf if h.tiny}) == len([h for h, _ in hf if h.tiny]), "parity names repeat"
    for h, f in hf:
        assert h.option in {"", *(p.option for p in f.full_size)}, h
        assert bool(h.mapping) == bool(h.tiny) == bool(h.tiny_config) == bool(h.option), h
        if h.tiny_config:
            assert h.tiny_config["model_type"] == h.model_type, h
            assert from_hf(h.tiny_config)["layers"] == 2, h


def test_every_hugging_face_model_type_has_a_mapping_or_a_reason():
    """A row's hf entry names MaxText's mapping (one MaxText has: a PARAM_MAPPING, HOOK_FNS and HF_SHAPE key) or the
    reason there is none, never both or neither; checkpoint/model/hf.py's tables are read from them."""
    from maxtext.checkpoint_conversion.utils.hf_shape import HF_SHAPE
    from maxtext.checkpoint_conversion.utils.param_mapping import HOOK_FNS, PARAM_MAPPING

    from moekit.checkpoint.model.hf import MAPPING_KEYS, NO_MAPPING, PER_EXPERT

    entries = [h for f in FAMILIES.values() for h in f.hf]
    for h in entries:
        assert bool(h.mapping) != bool(h.no_mapping), f"{h.model_type}: a mapping or the reason there is none"
        assert not h.mapping or h.mapping in set(PARAM_MAPPING) & set(HOOK_FNS) & set(HF_SHAPE), h.mapping
        assert h.mapping or not h.per_expert, h.model_type
    assert set(MAPPING_KEYS) | set(NO_MAPPING) == {h.model_type for h in entries}
    assert not set(MAPPING_KEYS) & set(NO_MAPPING) and PER_EXPERT <= set(MAPPING_KEYS.values())


def test_every_number_from_hf_reads_is_checked_first():
    """Each config.json key architecture.from_hf and its model types' readers (_HF_READERS) read as a number
    (int(...) or float(...)) is one checkpoint/model/hf_config.py checks first (COUNTS: whole numbers within
    bounds; NUMBERS): a new family's key left out of those would be read unchecked."""
    import ast
    import inspect

    from moekit.checkpoint.model import architecture
    from moekit.checkpoint.model.hf_config import COUNTS, NUMBERS

    read: dict[str, set[str]] = {"int": set(), "float": set()}
    readers = (architecture.from_hf, architecture._rope_hf, architecture._head_dim, *architecture._HF_READERS.values())
    for fn in readers:
        for call in ast.walk(ast.parse(inspect.getsource(fn))):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in read:
                for node in ast.walk(call):
                    key = node.slice if isinstance(node, ast.Subscript) else None
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                        key = node.args[0]
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        read[call.func.id].add(key.value)
    assert read["int"] and read["float"]
    assert read["int"] - set(COUNTS) == set(), "add these keys to hf_config.COUNTS"
    assert read["float"] - set(NUMBERS) - set(COUNTS) == set(), "add these keys to hf_config.NUMBERS"


def test_no_module_tells_families_apart_by_name():
    # checkpoint/model/architecture.py's to_hf branches on Hugging Face's model_type (HF_FAMILIES' keys), some of
    # which are spelled like a family: those compares of `kind` there are Hugging Face's names, not the family's.
    hf_kind = re.compile(rf"\bkind == \"({'|'.join(map(re.escape, HF_FAMILIES))})\"")
    found = compared(FAMILIES, ["config/kinds/families.py"])
    assert [ln for ln in found if not (ln.startswith("checkpoint/model/architecture.py:") and hf_kind.search(ln))] == []


# ---- model options say what MaxText's model files say ----


@pytest.mark.parametrize("option", MODELS)
def test_model_option_routing_is_maxtexts(option):
    cfg = compose("smoke", [f"model={option}"])
    base, model_file = model_values(cfg.model.name)
    maxtext = base | model_file
    assert cfg.model.decoder_block == maxtext["decoder_block"]
    for key, value in cfg.model.routing.model_dump().items():
        assert value == maxtext[key], (option, key)


# Totals of the full-size options, from each model's card (published, the family rows' full_size), against moekit
# plan's count.
PUBLISHED_PARAMS = {p.option: p.total_params for f in FAMILIES.values() for p in f.full_size}
# The gaps measured 2026-12-07 (MaxText 0.2.5): within 0.44% (gpt_oss_20b, whose card rounds to 21B) but for
# llama4_scout, -1.13%: its card's 109B likely counts the vision encoder, which MaxText's text decoder leaves out
# (not verified). A count that drops a part (an untied output head, the shared experts) misses by more.
PARAM_TOLERANCE = {"llama4_scout": 0.012}


@pytest.mark.parametrize("option", sorted(PUBLISHED_PARAMS))
def test_full_size_parameter_count_matches_the_published_one(option):
    cfg = compose("smoke", [f"model={option}"])
    dims = Dims.from_values(resolved_values(cfg, *model_values(cfg.model.name)))
    rel = PARAM_TOLERANCE.get(option, 0.005)
    assert dims.total_params() == pytest.approx(PUBLISHED_PARAMS[option], rel=rel)


# ---- refusals that know the family; MaxText's own verdict alongside ----

# id, overrides on experiment=smoke, a phrase of moekit's problem, MaxText's verdict: a phrase of its refusal, or
# None where it accepts the config and would go wrong later (ignore the key, or fail once the model is traced).
CASES = [
    ("llama4-top2", ["model=llama4_tiny", "model.experts_per_token=2"], "top-1", "Only top-1 routing"),
    (
        "llama4-capacity",
        ["model=llama4_tiny", "moe=capacity", "moe.allow_token_dropping=true"],
        "capacity_factor=",
        "capacity_factor >= 0",
    ),
    ("llama4-layers", ["model=llama4_tiny", "model.num_layers=6"], "multiple of 4", None),
    (
        "gpt-oss-capacity",
        ["model=gpt_oss_tiny", "moe=capacity", "moe.allow_token_dropping=true"],
        "GPT-OSS",
        "GPT-OSS MoE only supports dropless",
    ),
    ("gpt-oss-layers", ["model=gpt_oss_tiny", "model.num_layers=3"], "multiple of 2", None),
    ("gpt-oss-sinks-gpu", ["hardware=h200", "model=gpt_oss_tiny"], "sinks", None),
    (
        "qwen3-te",
        ["model=qwen3_moe_tiny", "moe=te", "hardware=h200", "cluster.gpus_per_node=2", "cluster.processes_per_node=2"],
        "norm_topk_prob",
        "norm_topk_prob",
    ),
    (
        "mixtral-bias-updates",
        ["model=mixtral_tiny", "model.routing.routed_bias=true", "model.routing.routed_bias_update_rate=0.001"],
        "does not read",
        "Loss-free load",
    ),
    ("mixtral-shared-expert", ["model=mixtral_tiny", "model.routing.shared_experts=1"], "does not read", None),
    ("qwen3-dense-layer", ["model=qwen3_moe_tiny", "model.first_dense_layers=1"], "leading dense layers", None),
    (
        "dsv2-groups-ignored",
        ["model=deepseek2_tiny", "model.routing.n_routing_groups=4", "model.routing.topk_routing_group=2"],
        "would be ignored",
        None,
    ),
    (
        "dsv3-groups-uneven",
        ["model.routing.n_routing_groups=3", "model.routing.topk_routing_group=1"],
        "equal groups",
        None,
    ),
    ("routing-in-extra", ["maxtext.extra.norm_topk_prob=true"], "routing key", None),
]
ACCEPTED = [  # family configurations both accept
    ("dsv3-group-limited", ["model.routing.n_routing_groups=4", "model.routing.topk_routing_group=2"]),
    *((f"{t}", [f"model={t}"]) for t in TINY),
]


@pytest.fixture(scope="session")
def case_verdicts():
    cases = {c: ["experiment=smoke", *ov] for c, ov, _, _ in CASES} | {
        c: ["experiment=smoke", *ov] for c, ov in ACCEPTED
    }
    return maxtext_verdicts(cases)


@pytest.mark.parametrize("case, overrides, ours, theirs", CASES, ids=[c[0] for c in CASES])
def test_family_refusals_before_launch(case, overrides, ours, theirs, case_verdicts):
    found = [str(p) for p in problems(compose("smoke", overrides))]
    assert any(ours in p for p in found), found
    verdict = case_verdicts[case]
    if theirs is None:
        assert verdict is None, verdict  # MaxText takes it: moekit's refusal is the only guard
    else:
        assert verdict is not None and theirs in verdict, verdict


@pytest.mark.parametrize("case, overrides", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_family_configs_both_accept(case, overrides, case_verdicts):
    assert problems(compose("smoke", overrides)) == []
    assert case_verdicts[case] is None


# ---- one ladder, shared by every family ----


def test_dsv3_ladder_experiments_are_the_shared_rungs():
    """dsv3_ladder_<n> is dsv3_baseline with rung n: the same config but for its name and expected numbers."""
    for n, rung in enumerate(LADDER):
        [named] = [e for e in group_options("experiment") if e.startswith(f"dsv3_ladder_{n}_")]
        a = compose(named).to_dict()
        b = compose("dsv3_baseline", [f"ladder={rung}"]).to_dict()
        for cfg in (a, b):
            cfg.pop("experiment_name"), cfg.pop("expect"), cfg["cluster"].pop("name")
        assert a == b, named


def test_each_rung_choice_is_written_once():
    """Rung 1's grouped GEMM (and every other rung's choice) is named in one file: its conf/ladder/ option."""
    files = [*CONF.glob("ladder/*.yaml"), *CONF.glob("experiment/*ladder*.yaml"), CONF / "experiment/dsv3_blog.yaml"]
    for group in ("moe", "xla", "precision", "memory"):
        owners = [p.relative_to(CONF).as_posix() for p in files if re.search(rf"override /{group}:", p.read_text())]
        expected = {"moe": ["ladder/1_grouped_gemm.yaml", "ladder/5_nccl_ep.yaml"]}.get(group, None)
        assert len(owners) == len(expected or [1]), (group, owners)
        if expected:
            assert sorted(owners) == expected


def test_layouts_leave_the_ladder_groups_alone():
    """A family's layout experiment supplies model and layout; a group it set would beat the ladder's choice."""
    for experiment in LAYOUTS:
        if experiment == "dsv3_baseline":
            continue  # names the defaults explicitly (moe=ragged_dot, ...); the rungs still win (test above)
        text = (CONF / "experiment" / f"{experiment}.yaml").read_text()
        assert not re.search(r"override /(moe|xla|precision|memory):", text), experiment


LADDER_CASES = {f"{e}:{r}": (e, r) for e in LAYOUTS for r in LADDER}


@pytest.fixture(scope="session")
def ladder_verdicts():
    return maxtext_verdicts({case: [f"experiment={e}", f"ladder={r}"] for case, (e, r) in LADDER_CASES.items()})


@pytest.mark.parametrize("case", sorted(LADDER_CASES))
def test_every_family_climbs_the_ladder(case, ladder_verdicts):
    experiment, rung = LADDER_CASES[case]
    cfg = compose(experiment, [f"ladder={rung}"])
    found = [str(p) for p in problems(cfg)]
    refused = LAYOUTS[experiment].get(rung)
    if refused:
        assert any(refused in p for p in found), found
    else:
        assert found == []
    if not refused or not refused.startswith("MaxText refuses"):  # moekit's own refusal: MaxText would take it
        assert ladder_verdicts[case] is None, ladder_verdicts[case]
    else:
        assert ladder_verdicts[case] is not None
    steps = {"0": "ragged_dot", "1": "te_gmm", "5": "te"}  # the rungs' back ends (conf/ladder/)
    assert cfg.moe.backend == steps.get(rung[0], cfg.moe.backend)
    if rung >= "3":
        assert cfg.precision.name == cfg.hardware.low_precision != "bf16"


def test_proxies_keep_the_layouts_per_gpu_experts():
    """A proxy has the full layer widths and the per-GPU expert count of its family's layout."""
    pairs = {lay.proxy: lay.experiment for f in FAMILIES.values() for lay in f.layouts}
    for proxy, layout in pairs.items():
        p, full = compose(proxy), compose(layout)
        ep = full.ici_filled["expert"] * full.parallelism.dcn.expert
        assert p.num_devices == 1 and p.model.num_experts == full.model.num_experts // ep, proxy
        assert (p.model.name, p.model.routing, p.model.experts_per_token) == (
            full.model.name,
            full.model.routing,
            full.model.experts_per_token,
        )
        assert set(p.model.extra) <= {"vocab_size"}, proxy  # widths untouched
        assert problems(p) == []


# ---- the tiny variants train (real MaxText on CPU) ----


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory) -> tuple[Path, object]:
    """One real sweep over the five tiny families (3 steps each), shared by the per-family tests."""
    folder = tmp_path_factory.mktemp("families") / "tiny"
    proc = moekit(
        "train",
        "-m",
        "experiment=smoke",
        "train.steps=3",
        f"model={','.join(TINY)}",
        f"run.dir={folder}",
        timeout=1800,
    )
    return folder, proc


@pytest.mark.integration
@pytest.mark.parametrize("option", TINY)
def test_tiny_family_trains_on_cpu(option, tiny_sweep):
    folder, proc = tiny_sweep
    sweep = json.loads((folder / "sweep.json").read_text())
    [run] = [r for r in sweep if f"model={option}" in r["overrides"]]
    assert run["returncode"] == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = Path(run["run_dir"])
    job = json.loads((run_dir / "job.json").read_text())
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert f"decoder_block={cfg['model']['decoder_block']}" in job["maxtext_args"]
    loss = losses(run_dir)
    assert len(loss) == 3 and all(0 < x < 20 for x in loss) and loss[-1] < loss[0]


def test_adapting_guide_lists_every_family_experiment_and_model():
    guide = (REPO / "docs" / "adapting.md").read_text()
    names = [e for e in group_options("experiment") if re.search(r"(_proxy_h200|_\d+gpu)$", e)] + MODELS
    assert [n for n in names if f"{n}" not in guide] == []


def test_other_sizes_pass_both_validators_on_their_familys_layout():
    """The full-size options a layout runs besides its experiment's own model (the rows' Layout.options)."""
    other = {
        o: lay.experiment
        for f in FAMILIES.values()
        for lay in f.layouts
        for o in lay.options
        if compose("smoke", [f"model={o}"]).model.name != compose(lay.experiment).model.name
    }
    assert other, "no layout runs a second size"
    cases = {m: [f"experiment={e}", f"model={m}"] for m, e in other.items()}
    for overrides in cases.values():
        assert problems(compose(None, overrides)) == [], overrides
    assert maxtext_verdicts(cases) == dict.fromkeys(cases)
