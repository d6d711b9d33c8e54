"""Regenerate docs/adapting.md's family table from the family rows (src/moekit/config/kinds/families.py): one line per
layout, its cluster and mesh and its proxy's model option, layers and experts read from the experiments, each experiment
linked to its recipe page (so a new family's pages need no line in the README's support matrix).

    python scripts/families_docs.py            # rewrite the table (make docs)
    python scripts/families_docs.py --check    # exit 1 when it differs from what the rows give

tests/test_families.py fails when the table is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from moekit.config.compose import compose, config_dir
from moekit.config.kinds.families import FAMILIES, Family, Layout

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import REPO, between, sync  # noqa: E402  (scripts/ is no package: the one path beside it)

DOC = REPO / "docs" / "adapting.md"
BEGIN, END = "<!-- BEGIN families (scripts/families_docs.py) -->", "<!-- END families -->"
HEAD = (
    "| family (`model.decoder_block`) | model options | routing (MaxText keys in `model.routing`) "
    "| cluster experiment: layout | proxy (one H200): its model option, layers and experts | tiny |\n"
    "|---|---|---|---|---|---|"
)
AXES = (("data", "DP"), ("fsdp", "FSDP"), ("tensor", "TP"), ("expert", "EP"))


def cluster(experiment: str) -> str:
    """`128 GB300 (16 x 8), FSDP 16 x EP 8`: the experiment's GPUs and the mesh axes it splits."""
    cfg = compose([f"experiment={experiment}"])
    nodes, per_node = cfg.cluster.nodes, cfg.cluster.gpus_per_node
    dcn = cfg.parallelism.dcn.model_dump()
    mesh = [f"{name} {cfg.ici_filled[axis] * dcn[axis]}" for axis, name in AXES if cfg.ici_filled[axis] * dcn[axis] > 1]
    gpus = nodes * per_node
    domain = " in one NVLink domain" if nodes > 1 and (cfg.hardware.nvlink_domain or 0) >= gpus else ""
    return f"{gpus} {cfg.hardware.name.upper()} ({nodes} x {per_node}){domain}, {' x '.join(mesh)}"


def model_option(experiment: str) -> str:
    """The conf/model option the experiment file chooses (its `override /model` default)."""
    defaults = yaml.safe_load((config_dir() / "experiment" / f"{experiment}.yaml").read_text())["defaults"]
    return next(d["override /model"] for d in defaults if isinstance(d, dict) and "override /model" in d)


def recipe(experiment: str) -> str:
    """A link to the experiment's recipe page (docs/recipes/, scripts/recipes.py; a proxy's is a section of its
    layout's page, `#one-gpu-proxy`)."""
    return f"[{experiment}](recipes/{experiment}.md)"


def line(f: Family, layout: Layout) -> str:
    """The table's line for one layout of a family."""
    proxy = compose([f"experiment={layout.proxy}"]).model
    return (
        f"| {layout.model} (`{f.decoder_block}`) | {', '.join(layout.options)} | {layout.routing} "
        f"| {recipe(layout.experiment)}: {cluster(layout.experiment)} "
        f"| [{layout.proxy}](recipes/{layout.experiment}.md#one-gpu-proxy): {model_option(layout.proxy)}, "
        f"{proxy.num_layers} layers, {proxy.num_experts} experts | {layout.tiny} |"
    )


def table() -> str:
    """The whole table, in the rows' order."""
    return "\n".join([HEAD, *(line(f, layout) for f in FAMILIES.values() for layout in f.layouts)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the table is stale")
    args = ap.parse_args(argv)
    return sync({DOC: between(DOC.read_text(), BEGIN, END, table())}, args.check, "make docs")


if __name__ == "__main__":
    sys.exit(main())
