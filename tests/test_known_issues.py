"""Known failures of moekit's stack on real clusters (docs/known-issues.md): each check or rendered default, shown on
the shipped experiment that would hit it."""

from __future__ import annotations

import re

from conftest import REPO, compose
from moekit.base import failures
from moekit.config.checks import ensure_valid, known_issues, warnings
from moekit.render import jobset as js
from moekit.translate.maxtext_args import maxtext_args

DOC = REPO / "docs" / "known-issues.md"


def _keys(cfg) -> dict[str, str]:
    return {a.key: a.render().split("=", 1)[1] for a in maxtext_args(cfg, "/run", "/run/metrics.jsonl")}


def _of(check, cfg) -> list:
    return list(check(cfg))


def test_ep_group_across_two_racks_warns_with_placement_or_pxn():
    # dsv3_blog: 128 GB300 GPUs fill two NVL72 racks; llama4_maverick_64gpu's 64 fit one.
    cfg = ensure_valid(compose("dsv3_blog"))
    (w,) = _of(known_issues.ep_group_within_one_nvlink_domain, cfg)
    assert "NVIDIA-NeMo/RL #2937" in w.what and "NCCL_PXN_DISABLE=1" in w.fix
    assert _of(known_issues.ep_group_within_one_nvlink_domain, compose("dsv3_blog_1024"))
    assert not _of(known_issues.ep_group_within_one_nvlink_domain, compose("llama4_maverick_64gpu"))
    pxn = compose("dsv3_blog", ["cluster.env.NCCL_PXN_DISABLE=1"])
    assert not _of(known_issues.ep_group_within_one_nvlink_domain, pxn)
    # 8-GPU nodes: NVLink ends at the node, EP across nodes is the layout's own choice (no rack to straddle)
    assert not _of(known_issues.ep_group_within_one_nvlink_domain, compose("qwen3_235b_64gpu"))


def test_ep_over_infiniband_warns_of_the_spcx_plugin():
    # qwen3_235b_64gpu keeps EP 8 inside each node; EP 16 across two nodes sends the all-to-all over IB.
    assert not _of(known_issues.spcx_plugin_at_high_ep, compose("qwen3_235b_64gpu"))
    across = ["parallelism.dcn.expert=2", "parallelism.dcn.fsdp=4"]
    (w,) = _of(known_issues.spcx_plugin_at_high_ep, ensure_valid(compose("qwen3_235b_64gpu", across)))
    assert "Megatron-Bridge #5462" in w.what and "2.30.5" in w.what
    assert w.fix.startswith("cluster.env.NCCL_NET_PLUGIN=none cluster.env.NCCL_NET=IB")
    fixed = compose("qwen3_235b_64gpu", [*across, *w.fix.split(" (")[0].split()[:2]])
    assert not _of(known_issues.spcx_plugin_at_high_ep, fixed)
    assert w in warnings(compose("qwen3_235b_64gpu", across))  # printed before launch with the others


def test_tp_with_the_te_block_warns_of_cpu_binding():
    assert not _of(known_issues.cpu_binding_for_tp_ep, compose("dsv3_blog"))
    tp = ensure_valid(compose("dsv3_blog", ["parallelism.ici.tensor=2", "parallelism.ici.fsdp=4"]))
    (w,) = _of(known_issues.cpu_binding_for_tp_ep, tp)
    assert "NVIDIA/nccl #2033" in w.what and "--cpu-bind" in w.fix


def test_rendered_jobset_waits_for_the_last_pod_and_fails_instead_of_looping():
    cfg = compose("dsv3_blog")
    assert cfg.cluster.rendezvous_timeout_s == 1800  # cluster=jobset's default: marin PR #7232's value
    assert _keys(cfg)["jax_distributed_initialization_timeout"] == "1800"  # the key MaxText reads (not an env var)
    spec = js.jobset(cfg)["spec"]
    assert spec["failurePolicy"]["restartStrategy"] == "BlockingRecreate"
    first = spec["failurePolicy"]["rules"][0]
    assert first["action"] == "FailJobSet"
    job = spec["replicatedJobs"][0]["template"]["spec"]
    (by_code,) = [r for r in job["podFailurePolicy"]["rules"] if "onExitCodes" in r]
    code = failures.RENDEZVOUS_TIMEOUT.exit_status
    assert by_code == {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [code]}}
    # What the Job controller writes for that rule matches the JobSet rule; the disruption rule's does not.
    index = job["podFailurePolicy"]["rules"].index(by_code)
    message = f"Container train for pod default/p failed with exit code {code} matching FailJob rule at index {index}"
    assert any(re.search(p, message) for p in first["onJobFailureMessagePatterns"])
    other = "Pod default/p has condition DisruptionTarget matching FailJob rule at index 0"
    assert not any(re.search(p, other) for p in first["onJobFailureMessagePatterns"])
    # ... and the free-restart rule of a drained node matches only its own message, in any order of the rules
    (free,) = [r for r in spec["failurePolicy"]["rules"] if r["action"] == "RestartJobSetAndIgnoreMaxRestarts"]
    assert any(re.search(p, other) for p in free["onJobFailureMessagePatterns"])
    assert not any(re.search(p, message) for p in free["onJobFailureMessagePatterns"])
    assert failures.exit_status(failures.RENDEZVOUS_TIMEOUT.failure(-6, "x")) == code
    assert failures.exit_status(failures.OTHER.failure(1, "x")) == 1


def test_host_network_binds_the_coordinator_on_ipv4_with_its_port():
    efa = {e["name"]: e.get("value") for e in js.pod_env(compose("qwen3_235b_64gpu", ["network=efa"]))}
    assert efa[js.BIND_ADDRESS] == "0.0.0.0:6002"
    ib = {e["name"] for e in js.pod_env(compose("qwen3_235b_64gpu"))}
    assert js.BIND_ADDRESS not in ib


def test_mxfp8_expert_gemms_only_inside_the_te_block():
    """TE #2966: MXFP8 grouped GEMMs need per-expert splits that are multiples of 32. moekit quantizes expert GEMMs
    to MXFP8 only in TE's MoE block (it pads each expert's rows itself); moe=te_gmm keeps them in bf16."""
    blog = _keys(compose("dsv3_blog"))
    assert blog["te_moe_block"] == "true" and blog["te_gmm_quantization"] == "te_mxfp8"
    gmm = _keys(compose("dsv3_blog", ["moe=te_gmm"]))
    assert gmm.get("te_gmm_quantization", "te_no_quant") != "te_mxfp8"


def test_the_known_issues_page_names_a_source_and_an_existing_test_for_each_row():
    table = DOC.read_text().split("## The failures", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| failure")]
    rows = [r for r in rows if not set(r) <= set("|- ")]
    assert len(rows) >= 10
    tests = "".join(p.read_text() for p in (REPO / "tests").glob("test_*.py"))
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 5, row
        assert re.search(r"[\w.-]+/[\w.-]+ (#|PR #)\d+|not found in the stored copies", cells[1]), row
        for name in re.findall(r"`(test_\w+)`", cells[4]):
            assert f"def {name}(" in tests, (name, row)
