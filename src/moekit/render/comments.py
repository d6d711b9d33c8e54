"""Comments at the fields of a rendered manifest (pure): the reason or the arithmetic behind a value, placed on its
own line(s) just above the field, in the JobSet examples' style.

A comment is text, never structure: its words may quote config values (an image name, a network option), so every
character that could end a line is replaced before it is written, and each comment goes in through a placeholder
key that PyYAML itself places, then becomes `# ...` lines at that key's indentation. The result is checked to load
as exactly the data it annotates.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import Any

import yaml

from moekit.base import parse

Path = tuple[str | int, ...]
"""Where a field is in the data: mapping keys and list indexes, outermost first."""

WIDTH = 116
_PLACEHOLDER = "__moekit_comment_{}__"
# Every character YAML (or a reader's terminal) could take as the end of a line, and the other control characters.
_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """`text` with every line break and control character made a space: it cannot end the comment it is in."""
    return " ".join(_BREAKS.sub(" ", text).split())


def _insert(data: Any, path: Path, key: str) -> bool:
    """Put `key: None` just before the field at `path` in its mapping; False when there is no such field."""
    *parents, last = path
    node = data
    for p in parents:
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            return False
    if not isinstance(node, dict) or last not in node:
        return False
    items = list(node.items())
    node.clear()
    for k, v in items:
        if k == last:
            node[key] = None
        node[k] = v
    return True


def annotated_yaml(data: dict[str, Any], comments: Sequence[tuple[Path, str]]) -> str:
    """`data` as block-style YAML in its own key order, each comment above the field at its path (a path the data
    does not have is skipped: the field is not rendered for this config)."""
    import copy

    marked = copy.deepcopy(data)
    texts: dict[str, str] = {}
    for i, (path, text) in enumerate(comments):
        key = _PLACEHOLDER.format(i)
        if _insert(marked, path, key):
            texts[f"{key}: null"] = one_line(text)
    body = yaml.safe_dump(marked, sort_keys=False, default_flow_style=False, width=120)
    out = []
    for line in body.splitlines():
        stripped = line.lstrip(" ")
        indent = line[: len(line) - len(stripped)]
        prefix = ""
        if stripped.startswith("- ") and stripped[2:] in texts:  # the first key of a list item
            prefix, stripped = "- ", stripped[2:]
        if stripped in texts:
            width = max(40, WIDTH - len(indent) - 2)
            out += [f"{indent}# {part}" for part in textwrap.wrap(texts[stripped], width, break_on_hyphens=False)]
            if prefix:  # the item's marker stays with the item's next key (PyYAML wrote it on the placeholder)
                out.append(f"{indent}{prefix}\u0000")
            continue
        if out and out[-1].endswith("\u0000"):
            out[-1] = out[-1][:-1] + stripped
            continue
        out.append(line)
    text = "\n".join(out) + "\n"
    if parse.yaml_text(text, "the rendered document", finite=False) != data:  # a comment changed the document
        raise AssertionError("a comment changed the rendered document")
    return text
