"""Write the generated parts of docs/performance.md (the index) from its pages in docs/performance/, and check them.

    python scripts/performance_docs.py            # rewrite the index's headline tables and its list of pages
    python scripts/performance_docs.py --check    # exit 1 when the index is stale or a rule below is broken

docs/performance.md holds the goals, the headline tables and a link to every page and section; each campaign or
family has a page of its own (docs/performance/<name>.md). The headline tables are copies of recorded tables
(benchmarks/run_presets.py and run_portability.py `--record` write between a page's markers), so no number is typed
twice. The rules --check holds (tests/test_performance_docs.py runs it): the index is current and at most MAX_LINES
lines; every `<!-- BEGIN x -->` and `<!-- END x -->` stands exactly once across the index and the pages; every link
into these pages from docs/, README.md and benchmarks/ names a page and a heading that exist.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import between  # noqa: E402  (scripts/ is no package: the one path beside it)

REPO = Path(__file__).resolve().parents[1]
INDEX = REPO / "docs" / "performance.md"
PAGES = REPO / "docs" / "performance"
MAX_LINES = 300
HEADLINES = (  # (page, the recorded section copied into the index, its caption)
    ("dsv3_proxy_h200.md", "presets", "The DeepSeek-V3 proxy's presets on one H200 (run C)"),
    ("families_h200.md", "portability families", "Every family's proxy: dense, te_gmm (and tokamax) on one H200"),
)
HEADLINE = ("<!-- BEGIN headline (scripts/performance_docs.py) -->", "<!-- END headline -->")
LISTING = ("<!-- BEGIN pages (scripts/performance_docs.py) -->", "<!-- END pages -->")
MARK = re.compile(r"<!-- (BEGIN|END) ([\w -]+?)(?: \(.*?\))? -->")
LINK = re.compile(r"\]\(([^)\s#]+\.md)#([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, spaces as '-', punctuation but '_' and '-' dropped."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")


def pages() -> list[Path]:
    """The pages, in name order."""
    return sorted(PAGES.glob("*.md"))


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of each markdown heading outside code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        m = None if fenced else re.match(r"^(#+) (.+)$", line)
        if m:
            out.append((len(m.group(1)), m.group(2).strip()))
    return out


def section(text: str, name: str) -> str:
    """The recorded body between `<!-- BEGIN name ...-->` and `<!-- END name -->`."""
    begin = re.search(rf"<!-- BEGIN {re.escape(name)}(?: \(.*?\))? -->\n", text)
    end = text.find(f"<!-- END {name} -->")
    if not begin or end < begin.end():
        raise SystemExit(f"no recorded section {name!r} to copy into the index")
    return text[begin.end() : end].rstrip("\n")


def headline() -> str:
    out = []
    for page, name, caption in HEADLINES:
        text = (PAGES / page).read_text()
        title = headings(text)[0][1]
        out += [f"**{caption}**, copied from [{title}](performance/{page}) (section `{name}`):", ""]
        out += [section(text, name), ""]
    return "\n".join(out).rstrip("\n")


def listing() -> str:
    out = []
    for page in pages():
        (_, title), *rest = headings(page.read_text())
        link = f"performance/{page.name}"
        subs = ", ".join(f"[{h}]({link}#{anchor(h)})" for level, h in rest if level == 2)
        out.append(f"- [{title}]({link})" + (f": {subs}" if subs else ""))
    return "\n".join(out)


def index() -> str:
    """The index as its pages give it."""
    return between(between(INDEX.read_text(), *HEADLINE, headline()), *LISTING, listing())


def problems(index_text: str) -> list[str]:
    """What breaks the rules of this module's docstring, given the index's text."""
    out = []
    lines = index_text.count("\n")
    if lines > MAX_LINES:
        out.append(f"docs/performance.md has {lines} lines, over {MAX_LINES}: move a section to a page")
    texts = {INDEX: index_text} | {p: p.read_text() for p in pages()}
    out += [f"docs/performance/{p.name} is not linked from the index" for p in pages() if p.name not in index_text]
    seen: dict[tuple[str, str], list[str]] = {}
    for path, text in texts.items():
        for kind, name in MARK.findall(text):
            seen.setdefault((kind, name), []).append(path.name)
    for (kind, name), where in sorted(seen.items()):
        if len(where) != 1:
            out.append(f"<!-- {kind} {name} --> stands {len(where)} times ({', '.join(where)}): once only")
        if (("END" if kind == "BEGIN" else "BEGIN"), name) not in seen:
            out.append(f"<!-- {kind} {name} --> has no partner")
    sources = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "benchmarks").rglob("*.md")]
    for source in filter(Path.is_file, sources):
        text = index_text if source == INDEX else source.read_text()
        for target, frag in LINK.findall(text):
            page = (source.parent / target).resolve()
            if page != INDEX and page.parent != PAGES:
                continue  # a link elsewhere: not these pages' business
            if not page.is_file():
                out.append(f"{source.relative_to(REPO)}: link to {target}, no such page")
            elif frag not in {anchor(h) for _, h in headings(texts.get(page) or page.read_text())}:
                out.append(f"{source.relative_to(REPO)}: link to {target}#{frag}, no such heading there")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the index is stale or a rule is broken")
    args = ap.parse_args(argv)
    want = index()
    if args.check:
        found = problems(want)
        if want != INDEX.read_text():
            found.insert(0, "docs/performance.md is stale: run `python scripts/performance_docs.py` and commit it")
        for p in found:
            print(p, file=sys.stderr)
        return 1 if found else 0
    INDEX.write_text(want)
    for p in problems(want):
        print(p, file=sys.stderr)
    print(f"wrote {INDEX.relative_to(REPO)} from {len(pages())} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
