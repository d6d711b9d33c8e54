"""What `${...}` interpolations in a composed config refer to, read from the unresolved text (pure).

A value that interpolates a secret (an environment variable or config key of a secret name, or a key that
itself interpolates one) is a secret too, wherever it lands: `run.name=${oc.env:HF_TOKEN}` would put the
token into directory names and every record. Only a secret-named key may hold one; there it is redacted
like a literal secret. Interpolation errors name the key that holds them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from moekit.base.errors import ConfigError
from moekit.base.redact import is_secret_name

# The innermost `${...}` of a value (a nested one is read from the inside out).
_REFERENCE = re.compile(r"\$\{([^${}]*)\}")


def leaves(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(path as a tuple of keys and list indices, value) of every leaf of a nested mapping/list."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, (*path, i))
    else:
        yield path, node


def dotted(path: Iterable[Any]) -> str:
    """A leaf path as the override key that sets it (list items as .0, .1)."""
    return ".".join(str(p) for p in path)


def references(text: str, where: tuple) -> Iterator[tuple[str, str]]:
    """('env', NAME) or ('key', dotted.key) for each interpolation in `text` held at `where`."""
    seen = text
    while True:
        found = list(_REFERENCE.finditer(seen))
        if not found:
            return
        for m in found:
            body = m.group(1).strip()
            if body.startswith("oc.env:"):
                yield "env", body.removeprefix("oc.env:").split(",", 1)[0].strip()
            elif ":" not in body and body:
                yield "key", _absolute(body, where)
        seen = _REFERENCE.sub("x", seen)


def _absolute(ref: str, where: tuple) -> str:
    """A relative reference (`${.sibling}`, `${..uncle}`) as a key from the top."""
    if not ref.startswith("."):
        return ref
    dots = len(ref) - len(ref.lstrip("."))
    base = [str(p) for p in where[: max(0, len(where) - dots)]]
    return ".".join([*base, ref.lstrip(".")])


def secret_sources(unresolved: Mapping[str, Any], extra: Iterable[str] = ()) -> dict[str, str]:
    """Dotted key -> the secret it interpolates (`${oc.env:HF_TOKEN}`, or a secret key), directly or through
    other keys, for every leaf whose own name is not a secret one."""
    extra = list(extra)
    values = {dotted(p): (p, v) for p, v in leaves(unresolved)}
    memo: dict[str, str | None] = {}

    def source(key: str, stack: frozenset[str]) -> str | None:
        if key in memo:
            return memo[key]
        if key in stack or key not in values:
            return None
        path, value = values[key]
        found = None
        if isinstance(value, str):
            for kind, name in references(value, path):
                if kind == "env" and is_secret_name(name, extra):
                    found = f"${{oc.env:{name}}}"
                elif kind == "key" and name in values:
                    if is_secret_name(name.rsplit(".", 1)[-1], extra):
                        found = f"${{{name}}}"
                    elif deeper := source(name, stack | {key}):
                        found = f"${{{name}}} (which holds {deeper})"
                if found:
                    break
        memo[key] = found
        return found

    out = {}
    for key, (path, _) in values.items():
        if is_secret_name(str(path[-1]) if path else key, extra):
            continue
        if found := source(key, frozenset()):
            out[key] = found
    return out


def refuse_secret_indirection(unresolved: Mapping[str, Any]) -> None:
    """Raise a ConfigError naming every non-secret key whose value would be a secret."""
    extra = [s for s in (unresolved.get("run") or {}).get("secrets") or [] if isinstance(s, str)]
    found = secret_sources(unresolved, extra)
    if not found:
        return
    lines = []
    for key, src in found.items():
        lines.append(
            f"  {key}: takes its value from {src}, a secret; moekit writes {key} in plain text (command lines, "
            "config.yaml, metrics, directory names, rendered files)"
        )
        lines.append(
            f"    fix: drop the interpolation from {key} and give it a plain value; a secret goes under a secret "
            "name only (a local run passes HF_TOKEN etc. from the environment as they are; a cluster job: "
            "cluster.secrets=[{env: NAME, secret: SECRET_NAME, key: KEY}])"
        )
    raise ConfigError("a secret would be written in plain text; nothing was launched:\n" + "\n".join(lines))


def resolve_each(raw: Any, unresolved: Mapping[str, Any]) -> None:
    """Resolve every interpolation, one key at a time, so that a failing one names its key (a ConfigError)."""
    from omegaconf.errors import OmegaConfBaseException

    for path, value in leaves(unresolved):
        if not (isinstance(value, str) and "${" in value):
            continue
        node = raw
        try:
            for part in path:
                node = node[part]
        except OmegaConfBaseException as exc:
            raise ConfigError(_explain(dotted(path), value, exc)) from None


def _explain(key: str, value: str, exc: Exception) -> str:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    env = [name for kind, name in references(value, tuple(key.split("."))) if kind == "env"]
    if env and "not found" in reason:
        fix = (
            f"export {env[0]} before running moekit, give a default (${{oc.env:{env[0]},DEFAULT}}), "
            f"or write {key}=VALUE"
        )
    else:
        fix = (
            f"interpolate a key that exists (`moekit config show` lists them), or write {key}=VALUE itself; "
            "a literal ${ is written \\${"
        )
    return f"{key}: the interpolation {value!r} cannot be resolved: {reason}\n  fix: {fix}"
