"""The command line itself: options and overrides in any order, a closed pipe, "did you mean"."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, moekit
from moekit import cli


def test_overrides_and_options_in_any_order(tmp_path):
    proc = moekit(
        "train", "experiment=smoke", "--dry-run", f"run.dir={tmp_path}/r", "--format", "json", "train.steps=3"
    )
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    assert view["config"]["run"]["dir"] == f"{tmp_path}/r" and view["config"]["train"]["steps"] == 3


def test_render_takes_its_output_option_between_overrides(tmp_path):
    out = tmp_path / "job.sbatch"
    proc = moekit("render", "experiment=smoke", "-o", str(out), "target=slurm", "cluster.nodes=2")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --nodes=2" in out.read_text()


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train", "x=1", "--dry-run", "y=2", "--format", "json"], (["x=1", "y=2"], True, "json")),
        (["train", "--dry-run", "x=1"], (["x=1"], True, "text")),
    ],
)
def test_parse_intermixed(argv, expected):
    args = cli.parse(argv)
    assert (args.overrides, args.dry_run, args.format) == expected and args.command == "train"


def test_a_closed_pipe_ends_quietly():
    """`moekit train --dry-run ... | head -1`: head exits after one line; moekit must not print a traceback."""
    script = f'{sys.executable} -m moekit train experiment=smoke --dry-run | head -1; echo "rc=${{PIPESTATUS[0]}}" >&2'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.stdout == "# resolved config\n"
    # 141 (128 + SIGPIPE, as for any writer whose reader left) when head was gone before moekit wrote, 0 when the
    # pipe took the whole output first; never a traceback.
    assert proc.stderr.strip() in ("rc=141", "rc=0"), proc.stderr


def test_subcommands_with_their_own_subcommands_still_parse():
    args = cli.parse(["bench", "gmm", "--experts", "4"])
    assert args.command == "bench" and args.bench == "gmm" and args.experts == 4
