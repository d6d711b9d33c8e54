"""`moekit config groups|show`: what can be chosen, and what a set of overrides composes to (and from where)."""

from __future__ import annotations

import argparse
import json

HELP = "list the config groups and their options, or show a composed config with the source of every value"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `groups` and `show` views, each with --format."""
    sub = p.add_subparsers(dest="view", required=True, metavar="VIEW")
    g = sub.add_parser("groups", help="every group, its options and what each one is (group=option to choose)")
    g.add_argument("group", nargs="?", help="only this group")
    s = sub.add_parser("show", help="the composed, typed config; each value with the file or override that set it")
    s.add_argument("overrides", nargs="*", help="Hydra overrides, as for moekit train")
    for q in (g, s):
        q.add_argument("--format", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    """Print the groups and their options, or the composed config with each value's source; returns 0."""
    from moekit.base.errors import ConfigError
    from moekit.config import sources
    from moekit.config.compose import GROUPS

    if args.view == "groups":
        found = sources.groups()
        if args.group:
            if args.group not in found:
                raise ConfigError(f"no group {args.group!r}; the groups are: {', '.join(GROUPS)}")
            found = {args.group: found[args.group]}
        print(json.dumps(found, indent=2) if args.format == "json" else format_groups(found))
        return 0
    from moekit.config.compose import compose

    cfg = compose(args.overrides)  # the overrides' own errors first, with their fixes
    comp = sources.composition(args.overrides)
    rows = sources.annotated(cfg.to_dict(), comp)
    if args.format == "json":
        view = {
            "files": comp.files,
            "choices": {c.group: {"option": c.option, "chosen_by": c.chosen_by} for c in comp.choices},
            "values": {k: {"value": v, "source": src} for k, v, src in rows},
        }
        print(json.dumps(view, indent=2))
    else:
        print(format_show(comp, rows))
    return 0


def format_groups(found: dict[str, dict[str, str]]) -> str:
    """Each group's options with their one-line descriptions, then how to choose them."""
    out = []
    for group, options in found.items():
        out.append(f"{group}=")
        width = max((len(o) for o in options), default=0)
        out += [f"  {o:<{width}}  {text}" for o, text in options.items()]
    out.append("")
    out.append("choose with group=option (moekit train moe=tokamax); set keys with a.b=value (train.steps=20);")
    out.append("moekit config show [overrides] shows the composed config and where each value comes from")
    return "\n".join(out)


def format_show(comp, rows: list[tuple[str, object, str]]) -> str:
    """The composed config as YAML-like lines, each value with what set it, headed by the group choices and the files
    in merge order."""
    out = ["# groups (option, chosen by)"]
    out += [f"#   {c.group}={c.option}  ({c.chosen_by})" for c in comp.choices]
    out.append("# files, in Hydra's merge order (a later one wins): " + ", ".join(comp.files))
    out.append("# key: value  # set by")
    width = min(60, max(len(k) + len(_text(v)) for k, v, _ in rows) + 2)
    out += [f"{f'{k}: {_text(v)}':<{width}}  # {src}" for k, v, src in rows]
    return "\n".join(out)


def _text(value: object) -> str:
    return json.dumps(value) if not isinstance(value, str) else value
