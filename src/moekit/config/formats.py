"""What each kind of config text may contain, so that no value can change the structure of a file moekit writes.

Rendered files quote values for their format (shlex for shell, a YAML library for YAML), but some places
cannot hold some characters at all: a comment line ends at a line break, an `#SBATCH` option at a space,
XLA_FLAGS splits at whitespace, a Kubernetes or Slurm name is a DNS label. Each rule here says what one kind
of value may hold, in words a message can repeat (pure).
"""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

from moekit.config.schema import Config

# Unicode categories that no value may hold: controls (newline, CR, tab, NUL, ESC), format characters
# (bidirectional overrides that make a reviewed line read differently), line/paragraph separators (YAML
# ends a comment line at U+2028/U+2029) and lone surrogates.
_REFUSED_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs")
_CONTROL_NAMES = {"\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\t": "TAB", "\0": "NUL", "\x1b": "ESCAPE"}


def unprintable(text: str) -> str | None:
    """The first character a one-line printable text cannot hold, named (e.g. 'U+000A LINE FEED'); else None."""
    for ch in text:
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            return f"U+{ord(ch):04X} {_CONTROL_NAMES.get(ch) or unicodedata.name(ch, 'CONTROL CHARACTER')}"
    return None


class Format(NamedTuple):
    """A kind of value: the pattern it must match in full, and how a message describes it."""

    pattern: re.Pattern[str]
    described: str
    max_len: int = 0  # 0: no limit

    def problem(self, value: str) -> str | None:
        """Why `value` is not of this kind, or None."""
        size = len(value.encode("utf8"))  # a file name's limit is in bytes; for ASCII the same as characters
        if self.max_len and size > self.max_len:
            unit = "characters" if size == len(value) else "bytes (UTF-8)"
            return f"is {size} {unit}; at most {self.max_len} ({self.described})"
        if not self.pattern.fullmatch(value):
            return f"is not {self.described}"
        return None


def _f(pattern: str, described: str, max_len: int = 0) -> Format:
    return Format(re.compile(pattern), described, max_len)


# Process 0's pod hostname <name>-workers-0-0.<name> (render/jobset.py) must fit in a 63-character label value.
JOB_NAME_MAX = (63 - len("-workers-0-0.")) // 2
JOB_NAME = _f(
    r"[a-z]([-a-z0-9]*[a-z0-9])?",
    f"a DNS-1035 label of at most {JOB_NAME_MAX} characters (lower-case letters, digits and '-', starting with "
    "a letter); it names the JobSet, its pods (twice in each hostname) and the Slurm job",
    JOB_NAME_MAX,
)
DNS_LABEL = _f(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", "a DNS-1123 label (lower-case letters, digits and '-', <= 63)", 63)
DNS_SUBDOMAIN = _f(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
    "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', <= 253)",
    253,
)
LABEL_KEY = _f(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?",
    "a Kubernetes label key ([prefix/]name: letters, digits, '-', '_', '.')",
    316,
)
LABEL_VALUE = _f(
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
    "a Kubernetes label value (letters, digits, '-', '_', '.', <= 63)",
    63,
)
SECRET_KEY = _f(r"[-._a-zA-Z0-9]+", "a Secret key (letters, digits, '-', '_', '.')", 253)
RESOURCE_NAME = _f(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?",
    "an extended resource name (e.g. rdma/rdma_shared_device_a)",
)
CAPABILITY = _f(r"[A-Z][A-Z_]*", "a Linux capability name (e.g. IPC_LOCK)")
# Docker's reference grammar, in short: [host[:port]/]path[:tag][@digest].
IMAGE = _f(
    r"([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*(:[0-9]+)?[/#])?"
    r"[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    "a container image reference ([registry/]repository[:tag][@sha256:digest]; enroot's registry#repository too)",
)
ENV_NAME = _f(
    r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name (letters, digits, '_', not starting with a digit)"
)
MAXTEXT_KEY = _f(r"[A-Za-z_][A-Za-z0-9_]*", "a MaxText key (letters, digits, '_')")
XLA_FLAG_NAME = _f(r"[a-z][a-z0-9_]*", "an XLA flag name without '--' (lower-case letters, digits, '_')")
# XLA_FLAGS is split at whitespace, and '"' starts XLA's own quoting; a list-valued flag uses commas.
XLA_FLAG_VALUE = _f(
    r"[^\s\"']*",
    "one XLA_FLAGS word: no whitespace or quotes (a flag that takes a list separates its items with ',')",
)
SLURM_NAME = _f(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*", "a Slurm name (letters, digits, '_', '.', '-'; ',' between)")
SLURM_TIME = _f(
    r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}",
    "a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)",
)
# A folder name: at most 255 bytes on Linux file systems; MaxText and moekit add suffixes to some (run names
# become <name>-<timestamp> and checkpoint folders), so the limit leaves room for them.
NAME_MAX = 128
EXPERIMENT_NAME = _f(
    r"(?!\.\.?$)[A-Za-z0-9_.-]+",
    f"a name of letters, digits, '_', '.' and '-', at most {NAME_MAX} characters (it names a folder of run.base_dir)",
    NAME_MAX,
)
OPTION_NAME = _f(r"[A-Za-z0-9_.-]+", "a name of letters, digits, '_', '.' and '-'")
VERSION = _f(r"\d+(\.\d+)*", "a version such as 1.30")
PATH_COMPONENT = _f(
    r"(?!\.\.?$)[^/\x00]+",
    f"a single path component (no '/', not '.' or '..', at most {NAME_MAX} bytes): it names a folder inside run.dir",
    NAME_MAX,
)


# pyxis splits --container-mounts at ',' and each mount at ':'.
CONTAINER_PATH = _f(
    r"/[^,:]*", "an absolute path without ',' or ':' (pyxis separates mounts and their parts with them)"
)
CONTAINER_MOUNT = _f(
    r"/[^,:]*:/[^,:]*(:[a-z+]+)?", "SRC:DST[:FLAGS] with absolute paths and no ',' (a pyxis bind mount)"
)


FABRIC_SUFFIX = "-fabric"  # a fabric-only job's name: the training job's, with this


def job_name(cfg: Config) -> str:
    """The one name of a cluster job (JobSet, its pods and Compose services, Slurm job): cluster.name, else the
    experiment name with '-' for '_' in lower case (dsv3_blog -> dsv3-blog), and for a fabric-only job that name
    with -fabric (dsv3-blog-fabric: applied beside the training job, it must not replace it). Checked with JOB_NAME."""
    if cfg.cluster.name:
        return cfg.cluster.name
    name = cfg.experiment_name.replace("_", "-").lower()
    if cfg.fabric.only:
        name = name[: JOB_NAME_MAX - len(FABRIC_SUFFIX)].rstrip("-") + FABRIC_SUFFIX
    return name


def job_name_fix(name: str) -> str:
    """A name in the JOB_NAME format derived from `name` (for a message's fix example)."""
    fixed = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    fixed = re.sub(r"^[^a-z]+", "", fixed)[:JOB_NAME_MAX].rstrip("-")
    return fixed or "moe"
