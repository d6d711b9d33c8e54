"""No config value can change the structure of a file moekit writes.

Every string field of the schema (found by walking it, so a new field is covered without editing this test) is
given hostile text: newlines, quotes, $(), backticks, '#', unicode. Each target is rendered (JobSet, Compose,
Slurm); the value must either be refused at validation with the field named, or the file must parse (YAML load;
bash -n plus the #SBATCH set) to exactly the fields moekit meant. The real parsers then get the renders with
hostile text in every field that accepts it at once: bash runs the Slurm script with a stub srun, docker compose
interpolates the Compose file, and the JobSet's args are expanded the way Kubernetes expands them.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from pydantic import BaseModel, ValidationError

from conftest import REPO, compose, moekit
from moekit.config import formats, schema
from moekit.config.checks import problems
from moekit.config.schema import Config
from moekit.render import compose as compose_target
from moekit.render import document, jobset, slurm
from test_jobset_emulation import expand as kube_expand  # Kubernetes' $(VAR) expansion, emulated once

CANARY = "/tmp/moekit-hostile-canary"
HOSTILE = [
    "a\nb: injected",  # a newline: refused everywhere
    "x\r\n#SBATCH --wrap=id",
    "a\u2028kind: Secret",  # YAML's line separator
    "\u202eevil",  # a bidirectional override
    "tab\there",
    'it\'s "quoted"',
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    "a # not a comment",
    "ünïcødé ✓ 漢字",
    "${HOME} $HOME $$ $(HOME)",
    "--dry-run; rm -rf /",
    "{x: [1, 2]}, &anchor *alias !!python/object",
    "back\\slash \\\\ twice",
]
PRINTABLE = [v for v in HOSTILE if formats.unprintable(v) is None]
TARGETS = {"jobset": "jobset", "compose": "jobset", "slurm": "slurm"}  # target -> the cluster option it runs under


# ---- the schema's string fields ----


def _models(annotation) -> list[type[BaseModel]]:
    return [a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]


def _is_str(annotation) -> bool:
    return annotation is str or str in typing.get_args(annotation)


def string_fields(model: type[BaseModel] = Config, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, kind) of every place a string goes: kind is value, key (of a mapping) or item (of a list)."""
    for name, info in model.model_fields.items():
        path, ann = f"{prefix}{name}", info.annotation
        if isinstance(ann, typing.ForwardRef):  # a model defined after its user (Cluster -> Toleration)
            ann = eval(ann.__forward_arg__, vars(schema))
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if origin is list and _models(args[0]):
            yield from string_fields(_models(args[0])[0], f"{path}.0.")
        elif _models(ann):
            yield from string_fields(_models(ann)[0], f"{path}.")
        elif origin is list and _is_str(args[0]):
            yield f"{path}.0", "item"
        elif origin is dict:
            yield f"{path}.KEY", "key"
            if _is_str(args[1]):
                yield f"{path}.SAFE_NAME", "value"
        elif _is_str(ann):
            yield path, "value"


FIELDS = sorted(string_fields())
# Required companions of a list entry or an unset section, so that only the field under test is hostile.
ENTRY_DEFAULTS = {
    "cluster.secrets": {"env": "SAFE_TOKEN", "secret": "safe", "key": "token"},
    "cluster.volumes": {"name": "data", "path": "/data"},
    "hardware.links": {"scale_up": "nvlink4", "scale_out": "cx7_400g", "host": "pcie5_x16"},
}
SOURCES = {"claim": "data", "host_path": "/data"}  # a JobSet volume needs one; Slurm mounts none
KEY_SAMPLE = {"network.resources.KEY": 1, "memory.tensors.KEY": "device"}  # a valid value under a tested key


def put(tree: dict, path: str, kind: str, value: str) -> None:
    """Set the field at `path` of a config tree to `value` (a mapping's only key when kind is key)."""
    parts, node = path.split("."), tree
    if path.startswith("cluster.volumes.") and tree["cluster"]["kind"] == "jobset" and parts[-1] not in SOURCES:
        tree["cluster"]["volumes"] = [ENTRY_DEFAULTS["cluster.volumes"] | {"claim": SOURCES["claim"]}]
    for i, part in enumerate(parts[:-1]):
        if part == "0":
            continue
        if parts[i + 1] == "0" and i + 2 == len(parts):  # a list of strings
            node[part] = [value]
            return
        if parts[i + 1] == "0":  # a list of entries
            if not node.get(part):
                node[part] = [dict(ENTRY_DEFAULTS.get(".".join(parts[: i + 1]), {}))]
            node = node[part][0]
            continue
        if node.get(part) is None:
            node[part] = dict(ENTRY_DEFAULTS.get(".".join(parts[: i + 1]), {}))
        node = node[part]
    if kind == "key":
        node.clear()
        node[value] = KEY_SAMPLE.get(path, "x")
    else:
        node[parts[-1]] = value


def _typed(tree: dict, path: str) -> Config | None:
    """The tree typed, or None where the schema itself refuses the value at `path` (a name it looks up, such as a
    hardware row's link class); any other refusal fails."""
    try:
        return Config.model_validate(tree)
    except ValidationError as exc:
        locs = [".".join(map(str, e["loc"])) for e in exc.errors()]
        assert all(path.startswith(loc) for loc in locs), (path, locs)
        return None


def _base(target: str) -> dict:
    tree = compose("smoke", [f"cluster={TARGETS[target]}"]).to_dict()
    tree["expect"] = {"provenance": {"kind": "published", "source": "a source"}}
    return tree


BASES = {t: _base(t) for t in TARGETS}


def _hydra_quoted(value: str) -> str:
    return "'" + value.replace("'", "\\'").replace("${", "\\${") + "'"


def _override(path: str, kind: str, value: str) -> str:
    return f"{path.rsplit('.', 1)[0]}={{{json.dumps(value)}: x}}" if kind == "key" else f"{path}={_hydra_quoted(value)}"


# ---- what each format's parser makes of a render ----


def _shape(node):
    """The structure of parsed YAML with leaf values blanked: which keys, how many list items."""
    if isinstance(node, dict):
        return {k: _shape(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_shape(v) for v in node]
    return type(node).__name__


def _header_is_comments(text: str, head: list[str]) -> None:
    lines = text.splitlines()
    lines = lines[1:] if lines[0] == "#!/bin/bash" else lines
    assert lines[: len(head)] == head and all(h.startswith("# ") for h in head)


def _sbatch(text: str) -> list[str]:
    """The options Slurm reads: #SBATCH lines before the first line that is not a comment or blank."""
    out = []
    for line in text.splitlines()[1:]:
        if line.startswith("#SBATCH"):
            out.append(line.removeprefix("#SBATCH").strip())
        elif line.strip() and not line.startswith("#"):
            break
    return out


def _slurm_command(text: str) -> list[str]:
    (line,) = [ln for ln in text.splitlines() if ln.startswith("srun ")]
    return shlex.split(line.removesuffix(" &"))


def _srun_argv(cfg: Config, overrides: list[str], slurm_env: dict[str, str] | None = None) -> list[str]:
    """What moekit means srun to get: its options, the train command, the per-job run dir (if it adds one); the
    ${SLURM_...} words it writes itself expanded from `slurm_env` when given."""
    run_dir = slurm.run_dir_word(cfg, overrides)
    words = [*shlex.split(" ".join(slurm.srun_options(cfg))), *slurm.train_command(cfg, overrides)]
    words += shlex.split(run_dir) if run_dir else []
    for name, value in (slurm_env or {}).items():
        words = [w.replace("${" + name + "}", value) for w in words]
    return words


def _render(target: str, cfg: Config, overrides: list[str]) -> tuple[str, list[str], object]:
    head = document.header(cfg, target, "moekit render " + shlex.join(overrides), "test")
    if target == "jobset":
        data = jobset.jobset(cfg, overrides)
        return document.yaml_text(data, head), head, data
    if target == "compose":
        data = compose_target.project(cfg, overrides)
        return document.yaml_text(data, head), head, data
    return slurm.script(cfg, overrides, head), head, None


def _check_render(target: str, cfg: Config, overrides: list[str], plain: tuple[Config, list[str]]) -> None:
    """The render parses to what moekit meant, with the structure of the same field holding plain text."""
    text, head, data = _render(target, cfg, overrides)
    plain_text, _, plain_data = _render(target, *plain)
    _header_is_comments(text, head)
    if target == "slurm":
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
        assert _sbatch(text) == _sbatch(plain_text)  # no value changes or adds an #SBATCH option
        assert _slurm_command(text) == ["srun", *_srun_argv(cfg, overrides)]
        return
    parsed = yaml.safe_load(text)
    assert parsed == data
    assert _shape(parsed) == _shape(yaml.safe_load(plain_text)) == _shape(plain_data)


# ---- 1. every field, every hostile value, every target ----


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v)[:24] for v in HOSTILE])
def test_each_field_refuses_or_renders_intact(target, value):
    refused, accepted = [], []
    for path, kind in FIELDS:
        tree = copy.deepcopy(BASES[target])
        put(tree, path, kind, value)
        cfg = _typed(tree, path)
        if cfg is None:
            refused.append(path)
            continue
        overrides = ["experiment=smoke", _override(path, kind, value)]
        found = problems(cfg)
        if found:
            named = path.rsplit(".", 1)[0] if kind == "key" else path
            keys = [p.key.replace("[", ".").replace("]", "") for p in found]  # cluster.volumes[0].x: .0.x
            assert any(k.startswith(named) for k in keys), (path, [str(p) for p in found])
            refused.append(path)
            continue
        assert formats.unprintable(value) is None, f"{path} accepted {value!r}, which no one-line place can hold"
        plain = copy.deepcopy(BASES[target])
        put(plain, path, kind, "plain")
        _check_render(target, cfg, overrides, (Config.model_validate(plain), ["experiment=smoke", f"{path}=plain"]))
        accepted.append(path)
    if formats.unprintable(value):
        assert not accepted
    else:  # free text is accepted (and rendered intact), identifiers refused: the test is not vacuous
        assert {"run.dir", "cluster.env.SAFE_NAME", "maxtext.extra.SAFE_NAME", "hardware.peak_source"} <= set(accepted)
        identifiers = {"cluster.name", "cluster.image", "cluster.namespace", "cluster.env.KEY", "xla.flags.SAFE_NAME"}
        assert identifiers <= set(refused)


def test_the_field_walk_finds_the_schema():
    paths = {p for p, _ in FIELDS}
    assert {"cluster.name", "cluster.secrets.0.secret", "cluster.tolerations.0.key", "run.secrets.0"} <= paths
    assert {"cluster.env.KEY", "cluster.env.SAFE_NAME", "xla.flags.SAFE_NAME", "expect.provenance.source"} <= paths
    assert len(FIELDS) > 50


# ---- 2. the real parsers, hostile text in every field that takes it ----


def _all_free_text(target: str, value: str) -> tuple[Config, list[str]]:
    tree, overrides = copy.deepcopy(BASES[target]), ["experiment=smoke"]
    for i, (path, kind) in enumerate(FIELDS):
        trial = copy.deepcopy(tree)
        tagged = f"{value}{i}"  # each field its own text, so a misplaced one is visible
        put(trial, path, kind, tagged)
        typed = _typed(trial, path)
        if typed is not None and not problems(typed):
            tree = trial
            overrides.append(_override(path, kind, tagged))
    return Config.model_validate(tree), overrides


@pytest.mark.parametrize("value", PRINTABLE, ids=[repr(v)[:24] for v in PRINTABLE])
def test_real_parsers_read_what_moekit_meant(value, tmp_path):
    Path(CANARY).unlink(missing_ok=True)
    # Slurm: bash runs the script with srun replaced by a stub that records its arguments.
    cfg, overrides = _all_free_text("slurm", value)
    script = tmp_path / "job.sbatch"
    script.write_text(_render("slurm", cfg, overrides)[0])
    stub = tmp_path / "bin" / "srun"
    stub.parent.mkdir()
    stub.write_text('#!/bin/bash\nprintf "%s\\0" "$@" > "$SRUN_ARGS"\n')
    stub.chmod(0o755)
    env = {"PATH": f"{stub.parent}:/usr/bin:/bin", "SRUN_ARGS": str(tmp_path / "args"), "HOME": str(tmp_path)}
    slurm_env = {"SLURM_JOB_ID": "42", "SLURM_SUBMIT_DIR": str(tmp_path)}
    assert subprocess.run(["bash", str(script)], env=env | slurm_env, cwd=tmp_path).returncode == 0
    argv = (tmp_path / "args").read_bytes().decode().split("\0")[:-1]
    assert argv == _srun_argv(cfg, overrides, slurm_env)
    typed = argv[-len(overrides) : -1] if slurm.run_dir_word(cfg, overrides) else argv[1 - len(overrides) :]
    assert typed == overrides[1:] and len(overrides) > 5

    # Compose: docker compose interpolates the file; the containers get the overrides and env as typed.
    cfg, overrides = _all_free_text("compose", value)
    path = tmp_path / "compose.yaml"
    path.write_text(_render("compose", cfg, overrides)[0])
    compose_bin = str(Path(sys.executable).parent / "docker-compose")
    got = subprocess.run(
        [compose_bin, "-f", str(path), "config", "--format", "json"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert got.returncode == 0, got.stderr
    # `config` prints a Compose file again, so it writes each $ of a value as $$: undo that, nothing else.
    node0 = json.loads(got.stdout.replace("$$", "$"))["services"]["node-0"]
    assert node0["command"] == ["train", "experiment=smoke", "cluster=jobset", *overrides[1:]]
    assert {k: v for k, v in node0["environment"].items() if k in cfg.cluster.env} == cfg.cluster.env
    assert len(cfg.cluster.env) == 1  # (HOME is this test's folder: an interpolated ${HOME} would differ)

    # JobSet: the pod's args, expanded as Kubernetes does, are the overrides as typed.
    cfg, overrides = _all_free_text("jobset", value)
    manifest = yaml.safe_load(_render("jobset", cfg, overrides)[0])
    (container,) = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    defined = {e["name"]: e.get("value", "") for e in container["env"]}
    assert [kube_expand(a, defined) for a in container["args"]][3:] == overrides[1:]
    assert not Path(CANARY).exists(), "a hostile value was executed"


# ---- 3. through the command line, as the issue reported it ----


def test_newline_in_cluster_name_is_refused_before_rendering():
    proc = moekit("render", "experiment=smoke", "target=slurm", "cluster.name='x\n#SBATCH --wrap=id'")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "cluster.name holds U+000A LINE FEED" in proc.stderr and "Traceback" not in proc.stderr


def test_hydra_delivers_hostile_text_unchanged():
    """The pure renders above get values as Hydra hands them over from a quoted override."""
    for value in PRINTABLE:
        cfg = compose("smoke", [f"cluster.env.SAFE_NAME={_hydra_quoted(value)}"])
        assert cfg.cluster.env["SAFE_NAME"] == value


# ---- files written from measured results: the preset table, a tuned preset ----


def _run_presets():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_presets", REPO / "benchmarks" / "run_presets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("value", PRINTABLE + ["two\nlines | and a pipe"], ids=lambda v: repr(v)[:24])
def test_preset_table_keeps_its_columns(value):
    presets = _run_presets()
    results = {
        "experiment": "dsv3_proxy_h200",
        "reference": "dense",
        "presets": {
            "dense": {"overrides": ["moe=dense"], "status": "ok", "batch": [2, 128], "losses": [1.0]},
            "bad": {"overrides": ["x=`a|b`"], "status": "failed", "error": value, "batch": [2, 128]},
        },
    }
    lines = presets.table(results).splitlines()
    rows = [ln for ln in lines if ln.startswith("|")]
    assert len(rows) == 4 and len(lines) == 2 + len(rows)  # one caption paragraph, a blank line, the table
    width = len(re.split(r"(?<!\\)\|", rows[0]))
    assert all(len(re.split(r"(?<!\\)\|", r)) == width for r in rows)


def test_tuned_preset_is_yaml_that_holds_the_winner():
    from moekit.commands import tune

    hostile = "a: b # c ${x} `id`"
    best = {
        "overrides": ["experiment=smoke", f"cluster.env.NOTE={_hydra_quoted(hostile)}", "moe=dense"],
        "tflops_per_device": 1.0,
        "step_time_s": 0.5,
        "run_dir": "/r",
        "versions": {"host": "h", "platform": "p"},
    }
    text = tune.preset_yaml("smoke_tuned", best)
    data = yaml.safe_load(text)
    assert all(line.startswith("#") for line in text.splitlines()[:2])
    # The preset is a Hydra config file: OmegaConf reads it, and gets the value back (\${ is its escape of ${).
    resolved = OmegaConf.to_container(OmegaConf.create(data), resolve=True)
    assert resolved["cluster"]["env"] == {"NOTE": hostile} and {"override /moe": "dense"} in data["defaults"]
    assert data["experiment_name"] == "smoke_tuned"
