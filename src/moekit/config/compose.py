"""Compose conf/ with Hydra's compose API and type the result with the schema."""

from __future__ import annotations

import contextlib
import difflib
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError

from moekit.config import formats
from moekit.config.schema import Config, defaults
from moekit.errors import ConfigError

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
    ConfigStore.instance().store(name=DEFAULTS_NODE, node=defaults())
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


def group_options(group: str, conf: Path | None = None) -> list[str]:
    """The options of a config group: the names of its YAML files in conf/<group>/, sorted."""
    folder = (conf or config_dir()) / group
    return sorted(p.stem for p in folder.glob("*.yaml"))


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
                "  fix: write it as KEY=VALUE (e.g. train.steps=20) or GROUP=OPTION (e.g. moe=tokamax)"
            )
        if bad := formats.unprintable(o):
            raise ConfigError(
                f"override {o!r}: {key} holds {bad}. moekit writes every override into one-line places (the "
                "`# render:` line of rendered files, #SBATCH scripts, command lines), where it would start a new "
                f"line.\n  fix: write {key} without it (one line of printable text)"
            )
    overrides = [f"++{o}" if o.startswith(OPEN_MAPPINGS) else o for o in overrides]
    if not (conf / "config.yaml").is_file():
        raise ConfigError(f"no moekit config tree at {conf}: set MOEKIT_CONF_DIR to the folder holding config.yaml.")
    try:
        with hydra_at(conf):
            return compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException, ValueError) as exc:  # Hydra raises ValueError for some input
        raise ConfigError(_explain_hydra_error(str(exc), overrides, conf)) from None


def _explain_hydra_error(message: str, overrides: Sequence[str], conf: Path) -> str:
    first = message.strip().splitlines()[0] if message.strip() else message
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


def _option_fix(group: str, overrides: Sequence[str], conf: Path) -> str:
    """'did you mean' and a fix example for an unknown group option; the example is one that this config accepts
    (composed and checked with the other overrides), so following the advice never leads to another refusal."""
    from moekit.config.checks import problems

    bad = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") == group]
    rest = [o for o in overrides if o not in bad]
    typed = bad[-1].split("=", 1)[1] if bad else ""
    options = group_options(group, conf)
    close = difflib.get_close_matches(typed.replace("-", "_"), options, n=3, cutoff=0.6) if typed else []
    for option in [*close, *options][:8]:  # each try composes the config (about 0.2 s), on this error path only
        try:
            if not problems(validate(compose_raw([*rest, f"{group}={option}"], conf))):
                mean = f"  did you mean {group}={option}?\n" if option in close else ""
                return f"{mean}  fix: {group}={option}" + (
                    "" if option in close else " (accepted with your other overrides)"
                )
        except ConfigError:
            continue
    return f"  fix: pick one of them ({group}=OPTION)"


def _valid_keys(parent: str) -> str:
    keys = _schema_keys(parent.split(".") if parent else [])
    return keys if keys != "?" else f"{parent} is not a section; top-level keys: {_schema_keys([])}"


def validate(raw: DictConfig) -> Config:
    """Type the composed config; pydantic's errors become one readable ConfigError."""
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
            lines.append(f"  {key}: {err['msg']} (got {err.get('input')!r})")
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
