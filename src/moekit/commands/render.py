"""`moekit render`: compose and check a config, then write it as a cluster manifest (JobSet YAML, sbatch script)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import moekit
from moekit.base import bounded, redact
from moekit.base.errors import ConfigError, MoekitError
from moekit.config.load import load
from moekit.config.schema import Config
from moekit.plan import launch
from moekit.render import document
from moekit.render import validate as val
from moekit.render.targets import TARGETS, Target
from moekit.rundir.output import write_output

HELP = "write the composed config as a JobSet manifest, a Slurm batch script or a Compose project"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The target and overrides, -o, --check, --crd, --kubernetes and --refresh."""
    p.add_argument("overrides", nargs="*", help=f"target=({'|'.join(TARGETS)}) plus Hydra overrides")
    p.add_argument("-o", "--output", help="write to FILE instead of standard output")
    p.add_argument(
        "--check",
        action="store_true",
        help="validate the file before it is used; exit 1 on errors. jobset: the JobSet CRD, the Kubernetes pod "
        "schema and the webhook's rules; compose: docker compose config; slurm: shell syntax (bash -n; Slurm itself "
        "checks the #SBATCH options: sbatch --test-only)",
    )
    p.add_argument(
        "--crd",
        help="your cluster's JobSet CRD for --check (kubectl get crd jobsets.jobset.x-k8s.io -o yaml); "
        "default: the schema of the JobSet release moekit ships",
    )
    p.add_argument("--kubernetes", help=f"Kubernetes API version for --check (default {val.KUBERNETES_VERSION})")
    p.add_argument("--refresh", metavar="DIR", help="re-render every manifest in DIR from the command in its header")


def split_target(overrides: Sequence[str]) -> tuple[str, list[str]]:
    """(target name, the other overrides); exactly one known `target=` must be given."""
    targets = [o.split("=", 1)[1] for o in overrides if o.startswith("target=")]
    rest = [o for o in overrides if not o.startswith("target=")]
    if len(targets) != 1 or targets[0] not in TARGETS:
        raise ConfigError(f"choose one target: target={'|'.join(TARGETS)} (got {targets or 'none'})")
    return targets[0], rest


def render(overrides: Sequence[str], output_label: str | None = None) -> tuple[str, Config, Target]:
    """Compose, check and render; `output_label` is the -o path recorded in the header."""
    name, rest = split_target(overrides)
    target = TARGETS[name]
    chosen = [o.split("=", 1)[1] for o in rest if o.startswith("cluster=")]
    if chosen and chosen != [target.cluster]:
        raise ConfigError(
            f"target={name} runs under cluster={target.cluster}, but the overrides choose cluster={chosen[-1]}; "
            f"drop it (cluster={target.cluster} is implied)"
        )
    keep = True if target.pod_network else (lambda w: w.key != "network")
    cfg = load([*rest, f"cluster={target.cluster}"] if not chosen else rest, warn=keep)
    launch.ensure(cfg)  # a manifest of a moe=te layout whose receive buffers do not fit is not written
    command = shlex.join(["moekit", "render", *overrides, *(["-o", output_label] if output_label else [])])
    head = document.header(cfg, target.title, command, moekit.__version__)
    text = target.render(cfg, rest, head)
    shown = redact.redact_urls(text)
    if shown != text:  # a manifest is committed, shared and applied: it never carries a password in clear text
        print(
            f"moekit: warning: a password in a URL was replaced by {redact.REDACTED} in this {target.title}; give the "
            "job its credentials through the storage's own mechanism (a Kubernetes Secret: cluster.secrets, a "
            "credentials file or a token variable), not inside the URL",
            file=sys.stderr,
        )
    if problem := too_large(target, shown):
        raise ConfigError(problem)
    if target.note and (note := target.note(cfg)):
        print(f"moekit: warning: {note}", file=sys.stderr)
    return shown, cfg, target


def too_large(target: Target, text: str) -> str | None:
    """Why the cluster would refuse a file this large (the target's max_bytes), or None."""
    size = len(text.encode())
    if not target.max_bytes or size <= target.max_bytes:
        return None
    return (
        f"the {target.title} would be {size:,} bytes; {target.limit} is {target.max_bytes:,} bytes, so the cluster "
        "would refuse it (nothing was written).\n  fix: set fewer or shorter environment variables (cluster.env "
        "and the other *.env mappings) and raw keys (maxtext.extra): put large values in a file or a ConfigMap "
        "and pass its path"
    )


RENDERED_MAX_BYTES = 8 * 1024 * 1024  # twice the largest target's own limit (render/targets.py max_bytes)


def recorded_command(path: Path) -> tuple[list[str], str | None]:
    """(overrides, -o label) from the '# render: moekit render ...' line of a rendered file."""
    try:
        text = bounded.read_text(path, RENDERED_MAX_BYTES, "rendered job file", errors="replace")
    except bounded.TooLarge as exc:
        raise MoekitError(f"{exc}, or move it out of the folder") from None
    except OSError as exc:
        raise MoekitError(
            f"{path}: cannot read it ({exc.strerror}).\n  fix: make it readable, or move it out of the folder"
        ) from None
    try:
        return document.recorded_command(text)
    except document.HeaderError as exc:
        fix = f"  fix: render it again with `moekit render ... -o {path}`, or move it out of the folder"
        raise MoekitError(f"{path}: {exc}.\n{fix}") from None


def refresh(folder: Path) -> list[Path]:
    """Re-render every moekit-written manifest in `folder` in place; returns the files written."""
    if not folder.is_dir():
        raise MoekitError(f"--refresh {folder}: no such folder; give the folder of rendered manifests (k8s)")
    rendered = []
    for path in sorted(folder.glob("*")):
        if path.suffix not in (".yaml", ".sh") or path.name == "kustomization.yaml":
            continue
        overrides, label = recorded_command(path)
        try:
            text, _, _ = render(overrides, label)
        except MoekitError as exc:
            raise type(exc)(f"{path} (from its '# render:' line): {exc}") from None
        rendered.append((path, text))
    for path, text in rendered:  # every file renders before any is replaced
        write_output(path, text)
    return [path for path, _ in rendered]


def run(args: argparse.Namespace) -> int:
    """Render to -o or stdout, or refresh a folder; returns 1 when --check finds problems, else 0."""
    if args.refresh:
        for path in refresh(Path(args.refresh)):
            print(f"moekit: rendered {path}", file=sys.stderr)
        return 0
    text, cfg, target = render(args.overrides, args.output)
    if args.check:
        if target.check is None:
            name = split_target(args.overrides)[0]
            raise MoekitError(f"--check: target={name} has nothing to check it against")
        found = target.check(text, cfg, args.crd, args.kubernetes)
        for p in found:
            print(f"moekit: invalid: {p}", file=sys.stderr)
        if found:
            print(f"moekit: {len(found)} problem(s); the cluster would reject this {target.title}", file=sys.stderr)
            return 1
        print(f"moekit: valid ({target.checked})", file=sys.stderr)
    if args.output:
        write_output(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0
