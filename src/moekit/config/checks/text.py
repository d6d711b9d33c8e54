"""Text and numbers fit the places they are written to: one-line printable text and identifier formats
(config/formats.py), finite 64-bit numbers, paths within a file system's limits."""

from __future__ import annotations

import math
from collections.abc import Iterator

from moekit.config import formats
from moekit.config.checks.problem import Problem
from moekit.config.schema import Config

# Field (dotted path; '*' is any mapping key or list index) -> the kind of text it holds, and the fix to print
# ({path}: the field). A field not listed holds any one-line printable text (each file quotes it for its format).
F = formats


FIELD_FORMATS: tuple[tuple[str, formats.Format, str], ...] = (
    ("experiment_name", F.EXPERIMENT_NAME, "experiment_name=smoke (or leave it to the experiment file)"),
    ("run.name", F.PATH_COMPONENT, "run.name=my-run"),
    ("run.secrets.*", F.OPTION_NAME, "name it as written in the environment or config, e.g. run.secrets=[HF_TOKEN]"),
    ("model.name", F.OPTION_NAME, "model.name=deepseek3-tiny (a file in MaxText's configs/models/)"),
    ("model.attention", F.OPTION_NAME, "model.attention=dot_product"),
    ("memory.name", F.OPTION_NAME, "memory.name=custom"),
    ("memory.remat_policy", F.OPTION_NAME, "memory.remat_policy=full"),
    ("xla.name", F.OPTION_NAME, "xla.name=custom"),
    ("xla.flags.*", F.XLA_FLAG_VALUE, "write {path} as one word (a list as items joined by ',', e.g. FUSION,CUBLAS)"),
    ("hardware.name", F.OPTION_NAME, "hardware=cpu (choose an option file rather than naming one)"),
    ("hardware.arch", F.OPTION_NAME, "hardware.arch=hopper"),
    ("network.name", F.OPTION_NAME, "network=none (choose an option file rather than naming one)"),
    ("network.capabilities.*", F.CAPABILITY, "network.capabilities=[IPC_LOCK]"),
    ("network.resource_claim_template", F.DNS_SUBDOMAIN, "network.resource_claim_template=moekit-compute-domain"),
    ("network.min_kubernetes", F.VERSION, "network.min_kubernetes=1.30"),
    ("cluster.image", F.IMAGE, "cluster.image=moekit:latest"),
    ("cluster.namespace", F.DNS_LABEL, "cluster.namespace=default"),
    ("cluster.queue", F.DNS_LABEL, "cluster.queue=team-a (the LocalQueue's name)"),
    ("cluster.service_account", F.DNS_SUBDOMAIN, "cluster.service_account=trainer"),
    ("cluster.node_selector.*", F.LABEL_VALUE, "give {path} a label value, e.g. NVIDIA-H200"),
    ("cluster.tolerations.*.key", F.LABEL_KEY, "give {path} a taint key, e.g. nvidia.com/gpu"),
    ("cluster.tolerations.*.value", F.LABEL_VALUE, "give {path} a taint value, e.g. ml"),
    ("cluster.secrets.*.env", F.ENV_NAME, "give {path} a variable name, e.g. HF_TOKEN"),
    ("cluster.secrets.*.secret", F.DNS_SUBDOMAIN, "give {path} the Secret's name, e.g. hf-token"),
    ("cluster.secrets.*.key", F.SECRET_KEY, "give {path} the key inside the Secret, e.g. token"),
    ("cluster.partition", F.SLURM_NAME, "cluster.partition=gpu (the name `sinfo` shows)"),
    ("cluster.account", F.SLURM_NAME, "cluster.account=ml (the name `sacctmgr show assoc` shows)"),
    ("cluster.time_limit", F.SLURM_TIME, "cluster.time_limit=02:00:00"),
    ("cluster.container_workdir", F.CONTAINER_PATH, "cluster.container_workdir=/workspace"),
    ("cluster.container_mounts.*", F.CONTAINER_MOUNT, "write {path} as /SRC:/DST, e.g. /data:/data"),
    ("cluster.volumes.*.claim", F.DNS_SUBDOMAIN, "give {path} the PersistentVolumeClaim's name, e.g. training-runs"),
)


KEY_FORMATS: tuple[tuple[str, formats.Format, str], ...] = (  # mapping, format of its keys, example key
    ("maxtext.extra", F.MAXTEXT_KEY, "log_period"),
    ("model.extra", F.MAXTEXT_KEY, "base_emb_dim"),
    ("memory.tensors", F.MAXTEXT_KEY, "moe_mlpwi_0"),
    ("xla.flags", F.XLA_FLAG_NAME, "xla_gpu_enable_latency_hiding_scheduler"),
    ("cluster.node_selector", F.LABEL_KEY, "nvidia.com/gpu.product"),
    ("network.resources", F.RESOURCE_NAME, "rdma/rdma_shared_device_a"),
    *((f"{section}.env", F.ENV_NAME, "NCCL_DEBUG") for section in ("memory", "xla", "hardware", "network", "cluster")),
)


# XLA_FLAGS is built from xla.flags, where every flag is checked; an env entry of that name would bypass it.
RESERVED_ENV = {"XLA_FLAGS": "xla.flags.NAME=VALUE (each flag is checked)"}


def _texts(node: object, path: str = "") -> Iterator[tuple[str, str, bool, str]]:
    """(dotted path, text, is a mapping key, path of the mapping or list holding it) for every string in a config
    tree. The holder is kept apart from the path: a key may itself hold '.' (`{"A.B": 1}` from a YAML file)."""
    if isinstance(node, dict):
        for k, v in node.items():
            where = f"{path}.{k}" if path else str(k)
            yield where, str(k), True, path
            yield from _texts(v, where)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _texts(v, f"{path}.{i}")
    elif isinstance(node, str):
        yield path, node, False, path.rsplit(".", 1)[0]


def _matches(path: str, pattern: str) -> bool:
    parts, want = path.split("."), pattern.split(".")
    return len(parts) == len(want) and all(w in ("*", p) for p, w in zip(parts, want, strict=True))


def text_fits_its_format(cfg: Config) -> Iterator[Problem]:
    """Every string is one line of printable text, and identifiers have their format (config/formats.py)."""
    for path, text, is_key, parent in _texts(cfg.to_dict()):
        bad = formats.unprintable(text)
        if bad:
            what = "key" if is_key else "value"
            yield Problem(
                path,
                f"the {what} {text!r} holds {bad}: moekit writes every config value into one-line places (the "
                "`# render:` line of each rendered file, #SBATCH options, XLA_FLAGS, command lines)",
                f"write {path} without it (one line of printable text)",
            )
            continue
        if is_key:
            for mapping, fmt, example in KEY_FORMATS:
                if _matches(parent, mapping) and (why := fmt.problem(text)):
                    yield Problem(path, f"the key {text!r} {why}", f"name it like {mapping}.{example}")
            if parent.endswith(".env") and text in RESERVED_ENV:
                yield Problem(path, f"{text} is built by moekit", f"set it through {RESERVED_ENV[text]}")
            continue
        for field, fmt, fix in FIELD_FORMATS:
            if _matches(path, field) and (why := fmt.problem(text)):
                yield Problem(path, f"{text!r} {why}", fix.format(path=path))


INT64_MAX = 2**63 - 1


# JAX without 64-bit mode (MaxText's) keeps a seed's low 32 bits: seeds that differ above them train alike.
SEED_MAX = 2**32 - 1


def _schema_default(key: str) -> object:
    """The schema's default for a dotted key, or None (a free-form mapping's key has none)."""
    from pydantic import BaseModel

    model: object = Config
    value: object = None
    for part in key.split("."):
        fields = getattr(model, "model_fields", None) if isinstance(model, type) else None
        if not fields or part not in fields:
            return None
        field = fields[part]
        value = None if field.is_required() else field.get_default(call_default_factory=True)
        model = field.annotation
    return None if isinstance(value, (BaseModel, dict, list)) else value


def _number_fix(key: str, kind: str) -> str:
    default = _schema_default(key)
    return f"{key}={default}" if default is not None else f"give {key} {kind}"


def numbers_in_range(cfg: Config) -> Iterator[Problem]:
    """Every number is finite and fits the 64-bit integers MaxText and JAX compute with (the seed, 32 bits):
    inf, nan or 10**20 would pass composition and fail only after launch, or train on silently."""
    for key, value in _numbers(cfg.to_dict()):
        if isinstance(value, float) and not math.isfinite(value):
            yield Problem(key, f"{value} is not a finite number", _number_fix(key, "a finite number"))
        elif isinstance(value, int) and key == "train.seed" and not 0 <= value <= SEED_MAX:
            yield Problem(
                key,
                f"{value} is outside 0..{SEED_MAX}: JAX (32-bit mode) keeps only a seed's low 32 bits",
                "train.seed=0 (any whole number from 0 to 4294967295)",
            )
        elif isinstance(value, int) and abs(value) > INT64_MAX:
            yield Problem(
                key,
                f"{value} does not fit in a 64-bit integer (at most {INT64_MAX})",
                _number_fix(key, "a smaller value"),
            )


# Linux: a file name holds at most 255 bytes, a path 4095; a run directory gets its own files and folders below.
NAME_BYTES, PATH_BYTES = 255, 3800


def paths_fit_the_file_system(cfg: Config) -> Iterator[Problem]:
    """run.dir and run.base_dir fit a Linux file system's limits, or the run would fail once launched."""
    for key in ("run.dir", "run.base_dir"):
        value = cfg.run.dir if key == "run.dir" else cfg.run.base_dir
        if not value:
            continue
        long = [part for part in value.split("/") if len(part.encode("utf8")) > NAME_BYTES]
        if long:
            yield Problem(
                key,
                f"the folder name {long[0][:40]!r}... is {len(long[0].encode('utf8'))} bytes; a file system allows "
                f"at most {NAME_BYTES}",
                f"give {key} shorter folder names",
            )
        elif len(value.encode("utf8")) > PATH_BYTES:
            yield Problem(
                key,
                f"is {len(value.encode('utf8'))} bytes long; at most {PATH_BYTES} leaves room for the run's own "
                "files below it (Linux allows 4095 in all)",
                f"give {key} a shorter path",
            )


def _numbers(node: object, path: str = "") -> Iterator[tuple[str, int | float]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _numbers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _numbers(v, f"{path}.{i}")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path, node
