"""docs/recipes/: one page per experiment that is not a ladder wrapper, generated from its config by
scripts/recipes.py (`make recipes`), current, linked from the README, and its commands render as printed."""

from __future__ import annotations

import importlib.util
import re
import shlex

import pytest

from conftest import REPO
from moekit.commands import render as render_cmd
from moekit.config.compose import group_options

_spec = importlib.util.spec_from_file_location("recipes", REPO / "scripts" / "recipes.py")
recipes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipes)
OUT = REPO / "docs" / "recipes"


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return recipes.pages()


def test_pages_are_current(pages):
    have = {p.name: p.read_text() for p in OUT.glob("*.md")}
    stale = sorted(n for n in pages.keys() | have.keys() if pages.get(n) != have.get(n))
    assert stale == [], "stale recipe pages: run `make recipes` and commit the result"


def test_every_experiment_but_the_ladder_wrappers_has_a_page():
    every = group_options("experiment")
    wrappers = [e for e in every if recipes.is_ladder_wrapper(e)]
    assert wrappers and all("_ladder_" in w for w in wrappers)
    assert sorted(recipes.experiments()) == sorted(set(every) - set(wrappers))
    # A family layout's proxy is the last section of the layout's page, not a page of its own.
    assert {p.stem for p in OUT.glob("*.md")} - {"README"} == set(recipes.experiments()) - set(recipes.proxies())
    for proxy, layout in recipes.proxies().items():
        section = (OUT / f"{layout}.md").read_text().split(f"\n{recipes.PROXY_SECTION}\n", 1)[1]
        assert f"experiment={proxy}" in section, layout


def test_the_readme_support_matrix_links_every_page():
    """Each page is linked from the README's support matrix, or, for a family's layout or proxy, from
    docs/adapting.md's family table (scripts/families_docs.py writes it from the family rows), which the matrix
    links."""
    readme = REPO / "README.md"
    matrix = readme.read_text().split("## Support matrix", 1)[1].split("\n## ", 1)[0]
    assert "](docs/adapting.md" in matrix
    guide = (REPO / "docs" / "adapting.md").read_text()
    families = guide.split("<!-- BEGIN families")[1].split("<!-- END families -->")[0]
    proxies = recipes.proxies()
    link = {e: f"{proxies[e]}.md#one-gpu-proxy" if e in proxies else f"{e}.md" for e in recipes.experiments()}
    linked = [e for e, to in link.items() if f"(docs/recipes/{to})" in matrix or f"(recipes/{to})" in families]
    assert sorted(set(recipes.experiments()) - set(linked)) == []


SKELETON = [
    "## What it reproduces",
    "## Hardware and image",
    "## Data",
    "## Commands",
    "## Sample log line",
    "## MFU",
    "## Expected numbers",
    "## Troubleshooting",
    "## Clean-up",
]
DIGEST = "registry.example.com/moekit@sha256:" + "0" * 64


def test_pages_follow_the_skeleton_and_their_render_commands_render(pages):
    proxies = recipes.proxies()
    layouts = {layout: proxy for proxy, layout in proxies.items()}
    for name in (e for e in recipes.experiments() if e not in proxies):
        text = pages[f"{name}.md"]
        own = SKELETON + [recipes.PROXY_SECTION] * (name in layouts)
        assert [h for h in re.findall(r"^## .+$", text, flags=re.M)] == own, name
        if name in layouts:  # the proxy's section: the skeleton a level down, its description first
            section = text.split(f"\n{recipes.PROXY_SECTION}\n", 1)[1]
            assert re.findall(r"^### .+$", section, flags=re.M) == ["#" + h for h in SKELETON[1:]], name
        assert "forecast" in text or "measured" in text.lower() or "published" in text or "no TFLOP/s" in text
        for line in re.findall(r"^moekit render .+$", text, flags=re.M):
            words = shlex.split(line.replace("$IMAGE", DIGEST))[2:]
            overrides = [w for w in words if "=" in w and not w.startswith("-")]
            body, cfg, _ = render_cmd.render(overrides)
            assert body and cfg.experiment_name in (name, layouts.get(name)), line
