"""The one parser of every structured file moekit reads (YAML and JSON: the config tree, run records, the CRD,
fabric.json, profile.json, events and metrics lines, hardware rows, presets) (effect: reads files).

Each file is read once through moekit.base.bounded (a regular file, a size bound), then decoded under the same
limits whatever its kind: YAML aliases are expanded only up to MAX_NODES values in all (a kilobyte of aliases can
otherwise stand for gigabytes), nesting stops at MAX_DEPTH (a deeper file would end in a RecursionError), and where
numbers are expected an infinite or NaN one is refused. Every refusal is a ParseError of one line naming the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from moekit.base import bounded
from moekit.base.errors import MoekitError

MAX_DEPTH = 100
"""Nesting of mappings and lists; moekit's deepest file (the JobSet CRD's schema) nests about 40 levels."""
MAX_NODES = 2_000_000
"""Values a document stands for once its aliases are expanded (a long text counts one per 64 characters)."""
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where present: fast


class ParseError(MoekitError, ValueError):
    """A structured file cannot be taken: not YAML/JSON, nested too deep, too many aliases, a non-finite number.
    A ValueError too, so a reader that skips an unreadable line or record keeps doing so."""


class TooComplex(ParseError):
    """A file nested deeper than MAX_DEPTH, or whose aliases expand past MAX_NODES."""


def _fail(name: str, why: str, kind: type[ParseError] = ParseError) -> ParseError:
    return kind(f"{bounded.shown(name)}: {why}")


def _check_events(text: str, name: str) -> None:
    """Walk the YAML event stream (flat, no recursion) before anything is built: the nesting depth and the
    number of values the document stands for with every alias expanded, each anchor's size counted once."""
    sizes: dict[str, int] = {}
    stack: list[list[Any]] = []  # [anchor, values so far] of each open mapping or list
    total = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(stack) >= MAX_DEPTH:
                raise _fail(name, f"nested deeper than {MAX_DEPTH} levels; no file moekit reads is", TooComplex)
            stack.append([event.anchor, 1])
            continue
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, size = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1 + len(event.value) // 64
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor not in sizes:  # an alias inside its own anchor: a cycle, or undefined
                raise _fail(name, f"the alias *{event.anchor} refers to itself or to no anchor before it", TooComplex)
            anchor, size = None, sizes[event.anchor]
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        if stack:
            stack[-1][1] += size
        else:
            total += size
        if total + sum(s for _, s in stack) > MAX_NODES:
            raise _fail(
                name, f"its aliases expand to more than {MAX_NODES:,} values; no file moekit reads does", TooComplex
            )


def _nonfinite(data: Any) -> str | None:
    """The path of the first infinite or NaN number in `data` ('a.b[2]'), or None. Iterative: any depth."""
    todo: list[tuple[str, Any]] = [("", data)]
    seen: set[int] = set()
    while todo:
        where, value = todo.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where or "the document"
        if isinstance(value, (dict, list)):
            if id(value) in seen:  # an alias: the same object, checked once
                continue
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                todo.append((f"{where}[{k}]" if isinstance(value, list) else f"{where}.{k}".lstrip("."), v))
    return None


def _finite(data: Any, name: str) -> Any:
    if (where := _nonfinite(data)) is not None:
        raise _fail(name, f"{where} is not a finite number (inf or nan); a number there must be finite")
    return data


def yaml_text(text: str, name: str, finite: bool = True, every: bool = False) -> Any:
    """The YAML document in `text` (`every`: the list of every document, empty ones dropped) from the file `name`,
    within MAX_DEPTH and MAX_NODES; `finite`: an inf or nan anywhere is refused. ParseError otherwise."""
    try:
        _check_events(text, name)
        data = [d for d in yaml.load_all(text, _LOADER) if d is not None] if every else yaml.load(text, _LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        problem = str(getattr(exc, "problem", None) or exc).strip().replace("\n", " ")
        if "nesting depth" in problem:  # libyaml's own limit, reached before the event walk counts it
            raise _fail(name, f"nested deeper than {MAX_DEPTH} levels; no file moekit reads is", TooComplex) from None
        raise _fail(name, f"not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise _fail(name, f"nested deeper than {MAX_DEPTH} levels; no file moekit reads is", TooComplex) from None
    except ParseError:  # the event walk's own refusal (aliases, depth): already one line naming the file
        raise
    except (KeyError, ValueError, TypeError, OverflowError) as exc:  # PyYAML's constructors on odd scalars
        raise _fail(name, f"not valid YAML: a value PyYAML cannot build ({type(exc).__name__})") from None
    return _finite(data, name) if finite else data


class _NonFinite(ValueError):
    pass


def _no_constant(word: str) -> float:
    raise _NonFinite(f"{word} is not a finite number (JSON has no NaN or Infinity)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"{text[:40]} is not a finite number (too large for a float)")
    return value


def json_text(text: str | bytes, name: str, finite: bool = True) -> Any:
    """The JSON value in `text` from the file `name`, nested at most MAX_DEPTH deep; `finite`: NaN, Infinity and
    numbers too large for a float (1e999) are refused. ParseError otherwise (also a ValueError)."""
    try:
        if finite:
            data = json.loads(text, parse_constant=_no_constant, parse_float=_float)
        else:
            data = json.loads(text)
    except RecursionError:
        raise _fail(name, f"nested deeper than {MAX_DEPTH} levels; no file moekit reads is", TooComplex) from None
    except _NonFinite as exc:
        raise _fail(name, f"{exc}; a number there must be finite") from None
    except ValueError as exc:  # JSONDecodeError, a non-finite number, an integer of thousands of digits
        raise _fail(name, f"not valid JSON: {str(exc).splitlines()[0][:200]}") from None
    _depth(data, name)
    return data


def _depth(data: Any, name: str) -> None:
    todo: list[tuple[int, Any]] = [(0, data)]
    while todo:
        depth, value = todo.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise _fail(name, f"nested deeper than {MAX_DEPTH} levels; no file moekit reads is", TooComplex)
            todo.extend((depth + 1, v) for v in (value.values() if isinstance(value, dict) else value))


def _text(path: str | Path, limit: int, what: str, follow: bool, fmt: str) -> str:
    data = bounded.read_bytes(path, limit, what, follow)
    try:
        return data.decode("utf8")
    except UnicodeDecodeError as exc:
        why = f"{text_kind(data) or exc.reason} at byte {exc.start}"
        raise _fail(str(path), f"not valid {fmt}: not UTF-8 text ({why})") from None


def text_kind(data: bytes) -> str | None:
    """What a byte string that is not UTF-8 is, when it says so itself: UTF-16 or UTF-32 text (a byte-order mark,
    or the zero bytes of ASCII in two-byte units), so that a message names it instead of calling it binary."""
    boms = {
        b"\xff\xfe\x00\x00": "UTF-32 text",
        b"\x00\x00\xfe\xff": "UTF-32 text",
        b"\xff\xfe": "UTF-16 text",
        b"\xfe\xff": "UTF-16 text",
    }
    for bom, kind in boms.items():
        if data.startswith(bom):
            return kind
    head = data[:512]
    half = len(head) / 2
    odd, even = head[1::2].count(0), head[0::2].count(0)
    # ASCII in two-byte units: one byte of each pair zero, the other not (all zeros is binary, not text)
    if len(head) >= 4 and ((odd > half * 0.8 and even < half * 0.2) or (even > half * 0.8 and odd < half * 0.2)):
        return "UTF-16 text"
    return None


def yaml_file(
    path: str | Path, limit: int, what: str = "file", finite: bool = True, follow: bool = True, every: bool = False
) -> Any:
    """yaml_text of the file at `path`, read once within `limit` bytes (bounded.read_bytes). TooLarge, OSError,
    ParseError."""
    return yaml_text(_text(path, limit, what, follow, "YAML"), str(path), finite, every)


def json_file(path: str | Path, limit: int, what: str = "file", finite: bool = True, follow: bool = True) -> Any:
    """json_text of the file at `path`, read once within `limit` bytes (bounded.read_bytes). TooLarge, OSError,
    ParseError."""
    return json_text(_text(path, limit, what, follow, "JSON"), str(path), finite)


def json_line(line: str | bytes, name: str = "a line", finite: bool = True) -> Any:
    """One line of a JSON-lines file (metrics, events): ParseError (a ValueError) when it is not JSON, nests too
    deep, or (`finite`) holds NaN/Infinity or a number too large for a float. Readers skip such a line as
    unreadable; a metrics reader passes finite=False, since a NaN loss is a measurement (the run diverged) and
    its step number is checked on its own."""
    return json_text(line, name, finite)
