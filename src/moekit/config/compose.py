"""Compose conf/ with Hydra's compose API and type the result with the schema."""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict
from pydantic import ValidationError

from moekit.base import bounded, parse
from moekit.base.errors import ConfigError
from moekit.config import formats, interpolation
from moekit.config.kinds import hardware
from moekit.config.kinds.families import FAMILIES, Tiny
from moekit.config.schema import Config, defaults

# Free-form mappings: a key under them may be new, so `a.b.KEY=V` is passed to Hydra as `++a.b.KEY=V`.
OPEN_MAPPINGS = (
    "maxtext.extra.",
    "model.extra.",
    "memory.tensors.",
    "memory.env.",
    "xla.flags.",
    "xla.env.",
    "hardware.env.",
    "network.env.",
    "cluster.env.",
    "cluster.node_selector.",
)
# Mappings whose values are text: an environment variable or a node label holds what the user typed, so
# `cluster.env.LIB_VERSION=1.10` stays "1.10" (Hydra's grammar would read it as the float 1.1, 1e3 as 1000.0).
TEXT_MAPPINGS = (
    "memory.env.",
    "xla.env.",
    "hardware.env.",
    "network.env.",
    "cluster.env.",
    "cluster.node_selector.",
)

GROUPS = (
    "experiment",
    "ladder",
    "model",
    "moe",
    "precision",
    "memory",
    "xla",
    "hardware",
    "cluster",
    "network",
    "data",
    "profile",
)


# The name config.yaml's defaults list gives the schema's defaults (schema.defaults, stored in Hydra's ConfigStore).
DEFAULTS_NODE = "base_config"


@contextlib.contextmanager
def hydra_at(conf: Path) -> Iterator[None]:
    """Hydra initialized on the config tree `conf`, with the schema's defaults where config.yaml's `base_config`
    entry finds them (Hydra's ConfigStore): no file repeats a default, and every key exists before the files and
    overrides set it. Hydra's global state is cleared on the way in and out."""
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    store = ConfigStore.instance()
    store.store(name=DEFAULTS_NODE, node=defaults())
    for name, tiny in stored_models().items():
        store.store(group="model", name=name, node={"defaults": [tiny.of, "_self_"], **tiny.keys})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with initialize_config_dir(config_dir=str(conf), version_base=None):
                yield
    finally:
        GlobalHydra.instance().clear()


def config_dir() -> Path:
    """conf/ of this checkout or image: $MOEKIT_CONF_DIR, else the repository's, else ./conf."""
    if env := os.environ.get("MOEKIT_CONF_DIR"):
        return Path(env).resolve()
    repo = Path(__file__).resolve().parents[3] / "conf"
    if (repo / "config.yaml").is_file():
        return repo
    return (Path.cwd() / "conf").resolve()


def stored_models() -> dict[str, Tiny]:
    """The conf/model options no file holds: each family's tiny size, kept in its row (config/kinds/families.py)."""
    return {f.tiny: f.tiny_size for f in FAMILIES.values()}


def group_options(group: str, conf: Path | None = None) -> list[str]:
    """The options of a config group: the names of its YAML files in conf/<group>/ and, for `model`, the families'
    tiny sizes (stored_models), sorted."""
    folder = (conf or config_dir()) / group
    stored = stored_models() if group == "model" else {}
    return sorted({p.stem for p in folder.glob("*.yaml")} | stored.keys())


def compose_raw(overrides: Sequence[str] = (), conf: Path | None = None) -> DictConfig:
    """Hydra composition only; Hydra's errors become ConfigErrors that list the valid choices."""
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    conf = conf or config_dir()
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if ("=" not in o and not o.startswith("~")) or not key:
            raise ConfigError(
                f"override {o!r} is not key=value or group=option.\n"
                "  fix: write it as KEY=VALUE (e.g. train.steps=20) or GROUP=OPTION (e.g. moe=dense)"
            )
        if bad := formats.unprintable(o):
            raise ConfigError(
                f"override {o!r}: {key} holds {bad}. moekit writes every override into one-line places (the "
                "`# render:` line of rendered files, #SBATCH scripts, command lines), where it would start a new "
                f"line.\n  fix: write {key} without it (one line of printable text)"
            )
    for o in overrides:
        if problem := _unsupported(o, conf) or _outside_tree(o, conf):
            raise ConfigError(problem)
    overrides = [f"++{o}" if o.startswith(OPEN_MAPPINGS) else o for o in map(as_typed, overrides)]
    if not (conf / "config.yaml").is_file():
        raise ConfigError(f"no moekit config tree at {conf}: set MOEKIT_CONF_DIR to the folder holding config.yaml.")
    try:
        with checked_tree(conf) as copy, hydra_at(copy):
            composed = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        choices = dict(composed.hydra.runtime.choices)  # which file each group's option came from
        with open_dict(composed):
            del composed["hydra"]
    except yaml.YAMLError as exc:  # a config file that is not YAML, or holds a duplicate key or a tag
        raise ConfigError(in_tree(yaml_problem(exc), conf)) from None
    except (HydraException, OmegaConfBaseException, ValueError) as exc:  # Hydra raises ValueError for some input
        raise ConfigError(in_tree(_explain_hydra_error(str(exc), overrides, conf), conf)) from None
    if problem := hardware.misnamed(choices.get("hardware"), composed.get("hardware", {}).get("name"), conf):
        raise ConfigError(problem)
    return composed


_COPY = "moekit-conf-"  # the prefix of a checked copy's folder, replaced by the tree's own path in messages


@contextlib.contextmanager
def checked_tree(conf: Path) -> Iterator[Path]:
    """A private copy of the config tree `conf`, made of the bytes moekit read and checked, for Hydra to compose
    from: each file is opened once (bounded: a regular file of at most CONFIG_MAX_BYTES), checked (UTF-8, YAML
    within parse's depth and alias limits, no tag moekit does not take, a defaults list that stays inside the
    tree, judged on the decoded YAML) and copied; a file swapped after the check is never read. ConfigError names
    the first file that fails."""
    files = _read_tree(conf)
    if problem := _tagged(files) or _defaults_outside(conf, files):
        raise ConfigError(problem)
    with tempfile.TemporaryDirectory(prefix=_COPY) as tmp:
        for path, data in files.items():
            target = Path(tmp) / path.relative_to(conf)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        yield Path(tmp)


def in_tree(message: str, conf: Path) -> str:
    """A message about the checked copy, naming the config tree's own files instead."""
    return re.sub(rf"{re.escape(tempfile.gettempdir())}/{_COPY}[^/\s]*", str(conf), message)


# YAML tags that only restate a plain scalar's type; any other tag (!!binary, !!timestamp, !!set, !!python/...) would
# have the loader build a value of another kind (bytes, a datetime, a set) that no config key holds.
PLAIN_TAGS = {"!!str", "!!int", "!!float", "!!bool", "!!null", "!!map", "!!seq"}


CONFIG_MAX_BYTES = 4 * 1024 * 1024  # a config file is a few kB; Hydra reads each it reaches whole


def _read_tree(conf: Path) -> dict[Path, bytes]:
    """Every config file of `conf` (by its path under `conf`), read once; ConfigError at the first that is not a
    regular file of at most CONFIG_MAX_BYTES (a pipe named x.yaml would hang Hydra, /dev/zero would fill the
    memory), is not UTF-8 text, or is YAML nested too deep or with aliases that expand too far."""
    files: dict[Path, bytes] = {}
    for path in sorted(conf.rglob("*.yaml")):
        try:
            files[path] = data = bounded.read_bytes(path, CONFIG_MAX_BYTES, "config file")
            _body(path, data)
        except bounded.TooLarge as exc:
            raise ConfigError(f"{exc}, or move it out of the config tree {conf}") from None
        except UnicodeDecodeError as bad:
            kind = parse.text_kind(data) or bad.reason
            raise ConfigError(
                f"{bounded.shown(path)}: not UTF-8 text ({kind} at byte {bad.start}).\n"
                "  fix: save it as UTF-8, or move it out of the config tree"
            ) from None
        except parse.TooComplex as exc:
            raise ConfigError(
                f"{exc}.\n  fix: write the values out plainly, or move it out of the config tree"
            ) from None
        except parse.ParseError:  # Hydra reports invalid YAML with its file and line
            continue
        except OSError:  # unreadable: Hydra reports it as a missing option
            continue
    return files


_BODIES: dict[tuple[Path, bytes], Any] = {}  # (file, its bytes) -> the decoded YAML: a file is decoded once a process


def _body(path: Path, data: bytes) -> Any:
    """The decoded YAML of a config file's bytes (parse.yaml_text: depth and alias limits); read-only to callers."""
    key = (path, data)
    if key not in _BODIES:
        if len(_BODIES) > 4096:
            _BODIES.clear()
        _BODIES[key] = parse.yaml_text(data.decode("utf8"), str(path), finite=False)
    return _BODIES[key]


def _tagged(files: dict[Path, bytes]) -> str | None:
    """The first config file and line holding a YAML tag moekit does not take, as a message with its fix; None when
    there is none. Only files holding '!' are tokenized."""
    for path, data in files.items():
        text = data.decode("utf8")
        if "!" not in text:
            continue
        try:
            for token in yaml.scan(text):
                if isinstance(token, yaml.TagToken):
                    handle, suffix = token.value
                    tag = f"{handle or ''}{suffix}"
                    if tag not in PLAIN_TAGS:
                        where = f"{bounded.shown(path)}, line {token.start_mark.line + 1}"
                        return (
                            f"{where}: the YAML tag {tag} is not allowed: config files are data (text, numbers, "
                            f"lists, mappings), and moekit never builds other values from them (nothing was run).\n"
                            f"  fix: remove the tag and write the value itself ({where})"
                        )
        except yaml.YAMLError:  # compose reports it with its file and line
            continue
    return None


def _defaults_outside(conf: Path, files: dict[Path, bytes]) -> str | None:
    """The first config file whose defaults list names a file outside the config tree (`- override /model: ../../x`,
    `- ../../x`, also written with YAML escapes: the list is judged decoded), as a message with its fix; None when
    every entry stays inside. The same rule as an override's (_outside_tree): Hydra would load any YAML file the
    list reaches."""
    root = conf.resolve()
    for path, data in files.items():
        try:
            body = _body(path, data)
        except (parse.ParseError, UnicodeDecodeError):  # compose reports it with its file and line
            continue
        entries = body.get("defaults") if isinstance(body, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            pairs = entry.items() if isinstance(entry, dict) else [(None, entry)]
            for key, value in pairs:
                for name in value if isinstance(value, list) else [value]:
                    if not isinstance(name, str):
                        continue
                    group = str(key or "").replace("override ", "").replace("optional ", "").strip()
                    group = group.split("@", 1)[0].strip("/")
                    here = root / group if key is not None else path.parent.resolve()
                    target = (root if name.startswith("/") else here) / f"{name.lstrip('/')}.yaml"
                    words = [*Path(group).parts, *Path(name).parts]
                    if ".." in words or name.startswith("~") or not target.resolve().is_relative_to(root):
                        shown = bounded.shown(f"{key}: {name}" if key is not None else name)
                        return (
                            f"{bounded.shown(path)}: its defaults list names `{shown}`, a file outside the config "
                            f"tree {conf}; moekit reads config only from that tree (nothing was run).\n"
                            f"  fix: name an option inside the tree (moekit config groups lists them), or copy the "
                            f"file into conf/{group or '<group>'}/"
                        )
    return None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A config file's YAML error as a message naming the file, the line and the fix (no traceback)."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}" if mark is not None else "a config file"
    problem = str(getattr(exc, "problem", None) or exc).strip()
    if "constructor for the tag" in problem:
        tag = problem.split("tag", 1)[1].strip().strip("'").replace("tag:yaml.org,2002:", "!!")
        return (
            f"{where}: the YAML tag {tag} is not allowed: config files are data, and moekit never constructs "
            f"objects from them (nothing was run).\n  fix: remove the tag and write the value itself ({where})"
        )
    if "duplicate key" in problem:
        first = getattr(exc, "context_mark", None)
        was = f" (first at line {first.line + 1})" if first is not None else ""
        return (
            f"{where}: {problem}{was}; moekit cannot tell which one is meant.\n"
            f"  fix: keep one {problem.removeprefix('found duplicate key').strip()}: key in that mapping"
        )
    quote = "quote values holding ': ', '#', '[' or '{'"
    return f"{where}: not valid YAML: {problem}.\n  fix: correct the file at that line ({quote})"


# Hydra's own settings: moekit composes with Hydra's compose API, which never reads them.
_HYDRA_FIXES = {
    "hydra.run.dir": "run.dir=PATH (the run directory) or run.base_dir=PATH (where new ones go)",
    "hydra.sweep.dir": "run.dir=PATH with -m (the sweep's folder; each run in PATH/<index>)",
    "hydra.job.chdir": "nothing: moekit never changes directory (relative paths are taken from where you run it)",
}


def _unsupported(override: str, conf: Path) -> str | None:
    """Why an override that Hydra would take silently does nothing or breaks every config; None if it is fine."""
    key = override.split("=", 1)[0].lstrip("+~")
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        fix = next((f for k, f in _HYDRA_FIXES.items() if key.startswith(k)), "drop it")
        return (
            f"override {override!r}: moekit does not use Hydra's own settings (hydra.*), so {key} would have no "
            f"effect.\n  fix: {fix}"
        )
    if override.startswith("~") and "=" not in override and key in GROUPS and key not in ("experiment", "ladder"):
        others = ", ".join(f"{key}={o}" for o in group_options(key, conf))
        default = _default_option(key, conf)
        drop = f"drop it (the default {key}={default} of conf/config.yaml applies), or " if default else ""
        return (
            f"override {override!r} removes the {key} group, and every config needs one of its options.\n"
            f"  fix: {drop}choose another option: {others} (moekit config groups describes them)"
        )
    if override.startswith("~") and key in _schema_keys([]).split(", ") and "." not in key:
        return (
            f"override {override!r} removes the {key} section, which every config has.\n"
            f"  fix: set its keys instead ({key}.KEY=VALUE; moekit config show lists them)"
        )
    return None


def _outside_tree(override: str, conf: Path) -> str | None:
    """Why a group option names a file outside the config tree (`model=../../x`, an absolute path, a link that
    leads out of conf/); None when it stays inside. Hydra would load any YAML file it reaches."""
    key, eq, option = override.partition("=")
    group = key.lstrip("+~").split("@", 1)[0]
    if not eq or group.split("/", 1)[0] not in GROUPS:
        return None
    root = conf.resolve()
    for name in (o.strip() for o in option.strip("[]").split(",")):  # a sweep or a list of options
        if not name:
            continue
        target = (conf / group / f"{name}.yaml").resolve()
        parts = Path(name).parts
        if name.startswith(("/", "~")) or ".." in parts or not target.is_relative_to(root):
            return (
                f"override {override!r}: {group}={name} names a file outside the config tree {conf}; moekit reads "
                "config only from that tree.\n"
                f"  fix: choose an option of conf/{group}/ ({', '.join(group_options(group, conf))}), or add your "
                f"file there (or set MOEKIT_CONF_DIR to a tree that holds it)"
            )
    return None


def _default_option(group: str, conf: Path) -> str | None:
    """The option conf/config.yaml's defaults list gives `group`, or None."""
    try:
        body = parse.yaml_file(conf / "config.yaml", CONFIG_MAX_BYTES, "config file", finite=False) or {}
    except (OSError, bounded.TooLarge, parse.ParseError):
        return None
    for entry in body.get("defaults") or []:
        if isinstance(entry, dict) and group in entry and isinstance(entry[group], str):
            return entry[group]
    return None


def as_typed(override: str) -> str:
    """The override with a value under a text mapping quoted when Hydra would read it as a number or boolean,
    so that it arrives as typed (1.10, 1e3, true, 007)."""
    key, eq, value = override.partition("=")
    if not eq or not key.lstrip("+").startswith(TEXT_MAPPINGS) or not value or value[0] in "'\"[{":
        return override
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_override(override).value()
    except Exception:  # Hydra's grammar refuses it: compose_raw names the override
        return override
    if isinstance(parsed, (bool, int, float)):
        return f"{key}='{value}'"
    return override


def _explain_hydra_error(message: str, overrides: Sequence[str], conf: Path) -> str:
    first = message.strip().splitlines()[0] if message.strip() else message
    inside = re.match(r"In '([\w/.-]+)': (.*)", first)
    if inside and (conf / f"{inside[1]}.yaml").is_file() and "Could not find" not in first:  # a file that fails
        return (
            f"{conf / inside[1]}.yaml: {inside[2]}\n"
            "  fix: correct that file: its defaults list names groups and options that exist (moekit config "
            "groups), and an experiment file starts with `# @package _global_`"
        )
    for group in GROUPS:
        if f"'{group}/" in message or f"in group '{group}'" in message or f"{group}:" in first:
            options = group_options(group, conf)
            return f"{first}\n  valid options for {group}=: {', '.join(options)}\n" + _option_fix(
                group, overrides, conf
            )
    if "Could not override" in message or "not in struct" in message:
        key = first.split("'")[1] if "'" in first else "?"
        parent, _, leaf = key.rpartition(".")
        close = difflib.get_close_matches(leaf, _schema_keys(parent.split(".") if parent else []).split(", "), n=1)
        value = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == key), "VALUE")
        mean = f"  did you mean {parent + '.' if parent else ''}{close[0]}? fix: " if close else "  fix: "
        example = f"{parent + '.' if parent else ''}{close[0]}={value}; " if close else "correct the spelling; "
        if not parent and (holders := _groups_holding(value, conf)):  # mode=dense: the value names a group's option
            group = (difflib.get_close_matches(leaf, holders, n=1, cutoff=0) or holders)[0]
            mean = f"  did you mean {group}={value}? ({value} is an option of the {group} group) fix: "
            example = f"{group}={value}; "
        return (
            f"unknown config key '{key}' (from overrides {list(overrides)}).\n"
            f"  valid keys{' under ' + parent if parent else ''}: {_valid_keys(parent)}\n"
            f"{mean}{example}to pass a raw MaxText key use maxtext.extra.{leaf}=VALUE"
        )
    if "Ambiguous value" in first:
        return (
            f"could not compose the configuration: {first}\n"
            "  a comma-separated value is a sweep: run one job per value with `moekit train -m ...`,\n"
            "  or write a list as key=[a,b]"
        )
    culprit = _unparsable(overrides)
    where = f" (in the override {culprit!r})" if culprit else ""
    return (
        f"could not compose the configuration: {first}{where}\n"
        "  fix: write each override as KEY=VALUE (lists as KEY=[a,b]; quote values with spaces or brackets)"
    )


def _unparsable(overrides: Sequence[str]) -> str | None:
    """The first override Hydra's grammar cannot parse, to name it in the message."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for o in overrides:
        try:
            parser.parse_overrides([o])
        except Exception:  # Hydra's OverrideParseException and the lexer's own errors
            return o.removeprefix("++")
    return None


_TRYING: list[str] = []  # the options _option_fix is composing now (it must not recurse into itself)


def _option_fix(group: str, overrides: Sequence[str], conf: Path) -> str:
    """'did you mean' and a fix example for an unknown group option; the example is one that this config accepts
    (composed and checked with the other overrides), so following the advice never leads to another refusal."""
    from moekit.config.checks import problems

    bad = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") == group]
    if not bad:  # a config file's defaults list chose it (the message's first line names the file)
        return (
            f"  fix: correct the {group} entry of the defaults list that chose it (the experiment or option file "
            "you picked) to one of the options above"
        )
    rest = [o for o in overrides if o not in bad]
    typed = bad[-1].split("=", 1)[1] if bad else ""
    elsewhere = [g for g in _groups_holding(typed, conf) if g != group]
    if elsewhere and typed not in group_options(group, conf):  # model=dense: the option belongs to another group
        return f"  did you mean {elsewhere[0]}={typed}? ({typed} is an option of the {elsewhere[0]} group)\n" + (
            f"  fix: {elsewhere[0]}={typed}"
        )
    options = [o for o in group_options(group, conf) if o != typed]  # the one typed exists but fails to compose
    close = closest(typed, options)
    if close and group == "experiment":
        mean = f"  closest names: {', '.join(f'{group}={c}' for c in close)}\n"
    else:
        mean = ""
    # An experiment is a whole setup: only a name close to the one typed is a fix, never an arbitrary other one.
    # Otherwise the option the config chooses without the override comes first (what the experiment was tuned with),
    # before any other in alphabetical order (which would put a slow path such as moe=dense first).
    chosen = _chosen_without(group, rest, conf)
    default = [chosen] if chosen in options and chosen not in close else []
    tries = close if group == "experiment" else [*close, *default, *[o for o in options if o not in default]]
    if _TRYING:  # a try's own error: no nested search for fixes
        return f"  fix: pick one of them ({group}=OPTION)"
    for option in tries[:8]:  # each try composes the config (about 0.2 s), on this error path only
        try:
            _TRYING.append(option)
            if not problems(validate(compose_raw([*rest, f"{group}={option}"], conf))):
                mean = mean or (f"  did you mean {group}={option}?\n" if option in close else "")
                why = "what the config chooses without it; " if option in default else ""
                return f"{mean}  fix: {group}={option}" + (
                    "" if option in close else f" ({why}accepted with your other overrides)"
                )
        except ConfigError:
            continue
        finally:
            _TRYING.pop()
    return f"{mean}  fix: pick one of them ({group}=OPTION; `moekit config groups` says what each is)"


def _groups_holding(option: str, conf: Path) -> list[str]:
    """The config groups that have an option of this name (moe for `dense`), in GROUPS' order."""
    if not option or not re.fullmatch(r"[\w-]+", option):
        return []
    return [g for g in GROUPS if option in group_options(g, conf)]


def _chosen_without(group: str, overrides: Sequence[str], conf: Path) -> str | None:
    """The option of `group` the config tree chooses with these overrides (the experiment's or config.yaml's), or
    None when that does not compose."""
    from hydra import compose

    try:
        with hydra_at(conf):
            cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        return cfg.hydra.runtime.choices.get(group)
    except Exception:  # noqa: BLE001 (any refusal: no option to put first)
        return None


def closest(typed: str, options: Sequence[str]) -> list[str]:
    """Up to three options nearest to `typed`: those that contain it, then the most similar spellings."""
    if not typed:
        return []
    word = typed.replace("-", "_").lower()
    found = [o for o in options if word in o.lower()]
    found += difflib.get_close_matches(word, options, n=3, cutoff=0.6)
    found += difflib.get_close_matches(word, options, n=3, cutoff=0.4)
    return list(dict.fromkeys(found))[:3]


def _valid_keys(parent: str) -> str:
    keys = _schema_keys(parent.split(".") if parent else [])
    return keys if keys != "?" else f"{parent} is not a section; top-level keys: {_schema_keys([])}"


def validate(raw: DictConfig) -> Config:
    """Type the composed config; pydantic's errors become one readable ConfigError. A value that interpolates a
    secret, or an interpolation that cannot be resolved, is refused first, naming its key."""
    unresolved = OmegaConf.to_container(raw, resolve=False)
    interpolation.refuse_secret_indirection(unresolved)
    interpolation.resolve_each(raw, unresolved)
    data = OmegaConf.to_container(raw, resolve=True)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        lines, seen = [], set()
        for err in exc.errors():
            if err["type"] == "extra_forbidden":
                key = ".".join(str(p) for p in err["loc"])
                lines.append(f"  {key}: unknown key (valid keys: {_schema_keys(err['loc'][:-1])})")
                continue
            key, fix = _fix_for(err["loc"])
            if key in seen:  # a union type reports once per member
                continue
            seen.add(key)
            got = err.get("input")  # a whole section's mapping is noise: its message names the keys
            lines.append(f"  {key}: {err['msg']}" + ("" if isinstance(got, dict) else f" (got {got!r})"))
            lines.append(f"    fix: {fix}")
        raise ConfigError("invalid configuration:\n" + "\n".join(lines)) from None


def _fix_for(loc: Sequence[object]) -> tuple[str, str]:
    """(the key at fault, how to repair it): the schema's default (or the field's first example) serves as the
    example value."""
    model, field, parts = Config, None, []
    for part in loc:
        found = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        if found is None:
            break
        field, model = found, found.annotation
        parts.append(str(part))
    key = ".".join(parts) or "config"
    if field is None or (isinstance(model, type) and hasattr(model, "model_fields")):
        return key, f"change the {key} keys named above so that they agree (types and ranges: config/schema.py)"
    rest = [str(p) for p in loc[len(parts) :] if not str(p).startswith(("function-", "str", "int", "float", "bool"))]
    if rest and isinstance(field.get_default(call_default_factory=True), dict):  # an entry of a free-form mapping
        entry = f"{key}.{rest[0]}"
        return entry, f"give {entry} one plain value: text, a number or true/false, e.g. {entry}=VALUE (not a list)"
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    if default is None and field.examples:  # a key whose default is "unset" names an example value instead
        default = field.examples[0]
    example = f", e.g. {key}={default}" if default is not None and not isinstance(default, (dict, list)) else ""
    return key, f"give {key} a value of the kind described{example}"


def _schema_keys(loc: Sequence[object]) -> str:
    model = Config
    for part in loc:
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and hasattr(annotation, "model_fields")):
            return "?"
        model = annotation
    return ", ".join(model.model_fields)


def compose(overrides: Sequence[str] = (), conf: Path | None = None) -> Config:
    """Compose and type a configuration from Hydra overrides (group=option, a.b=value)."""
    return validate(compose_raw(overrides, conf))
