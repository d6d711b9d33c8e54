"""Rendered JobSets explain themselves: a comment above each field a rule sets, and no comment can change the
document (render/comments.py)."""

from __future__ import annotations

import yaml

from conftest import REPO, compose
from moekit.render import comments, jobset
from moekit.render.targets import TARGETS

GOLDENS = sorted((REPO / "k8s").glob("*.yaml"))
# A field whose value a rule sets -> a phrase its comment has (the rule's key or its reason).
EXPLAINED = {
    "parallelism:": "cluster.nodes",
    "backoffLimit:": "cannot rejoin",
    "terminationGracePeriodSeconds:": "cluster.signal_grace_s",
    "image:": "sha256",
    "resourceClaims:": "DRA",
    "resources:": "cluster.gpus_per_node",
    "maxRestarts:": "cluster.max_restarts",
}


def _comment_above(lines: list[str], i: int) -> str:
    out = []
    while i > 0 and lines[i - 1].lstrip().startswith("#"):
        i -= 1
        out.insert(0, lines[i].strip().lstrip("# "))
    return " ".join(out)


def test_every_golden_explains_its_rule_fields():
    for path in [p for p in GOLDENS if p.name != "kustomization.yaml"]:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            field = line.strip().removeprefix("- ").split(" ")[0]
            if field in EXPLAINED:
                assert EXPLAINED[field] in _comment_above(lines, i), (path.name, field)


def test_the_mesh_arithmetic_is_at_parallelism():
    cfg = compose("dsv3_blog")
    text = TARGETS["jobset"].render(cfg, [], [])
    assert "has 128 devices = 32 nodes x 4 GPUs" in " ".join(text.replace("#", " ").split())
    assert yaml.safe_load(text) == jobset.jobset(cfg, [])  # the comments are comments only


def test_no_comment_text_can_change_the_document():
    data = {"a": {"b": 1, "c": [{"d": "x"}, {"e": "y: z"}]}, "f": "__moekit_comment_0__: null"}
    hostile = "ok\nkind: Evil\r\n- injected\u2028also: this\x85and: that"
    text = comments.annotated_yaml(data, [(("a", "b"), hostile), (("a", "c", 1, "e"), hostile), (("f",), hostile)])
    assert yaml.safe_load(text) == data
    assert all(ln.lstrip().startswith("#") or "Evil" not in ln for ln in text.splitlines())
    assert comments.one_line(hostile).count("\n") == 0


def test_hostile_config_values_stay_inside_their_comment():
    cfg = compose("smoke", ["cluster=jobset", "cluster.gpus_per_node=1", "cluster.image=reg/moekit:tag"])
    cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"image": "reg/x:1\nkind: Evil"})})
    text = TARGETS["jobset"].render(cfg, [], [])
    assert yaml.safe_load(text) == jobset.jobset(cfg, [])
    assert not any(ln.startswith("kind: Evil") for ln in text.splitlines())
