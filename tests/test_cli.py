"""The command line: options and overrides in any order, a closed pipe, "did you mean"; it imports what the
running command needs and no more, and the GPU recipe's wheel list (benchmarks/h200/wheels.txt) covers what
moekit's commands import there."""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import subprocess
import sys

import pytest

from conftest import REPO, dependency_closure, moekit
from moekit import cli

HEAVY = ("hydra", "omegaconf", "pydantic", "jsonschema", "matplotlib", "numpy", "jax", "yaml", "maxtext")
# The commands benchmarks/h200/run.sh runs on the GPU machine (tune and verify run `moekit train` per trial).
GPU_SIDE = [
    ["train", "experiment=smoke", "--dry-run"],
    ["plan", "experiment=dsv3_proxy_h200"],
    ["config", "show", "experiment=smoke"],
    [
        "bench",
        "dispatch",
        "--iters",
        "1",
        "--tokens",
        "64",
        "--hidden",
        "32",
        "--ffn",
        "16",
        "--gmm-backend",
        "ragged_dot",
    ],
    ["tune", "--help"],
    ["verify", "--help"],
]
# What the GPU machine has before anything is installed (benchmarks/h200/README.md): these and their dependencies.
ON_THE_MACHINE = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint")
# Imported when installed, skipped when not (try/except ImportError in the importer).
OPTIONAL = {
    "attr": "omegaconf._utils: attrs classes as configs",
    "cloudpickle": "jax._src.pickle_util",
    "filelock": "jax._src.lru_cache: only for jax_compilation_cache_max_size",
    "_distutils_hack": "setuptools' .pth hook, run by site at start-up",
}


def imported(*args: str) -> set[str]:
    """Top-level modules a `moekit ...` process imports (python -X importtime)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "moekit", *args], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)", proc.stderr, re.M)
    return {n.strip().split(".")[0] for n in names}


def test_help_imports_no_command_dependency():
    found = imported("--help")
    assert not found & set(HEAVY), found & set(HEAVY)


def test_every_command_module_keeps_the_contract_cli_states():
    """cli.py's docstring: each command module defines HELP, add_arguments(parser) and run(args); cli imports only
    the one that runs (its HELP is read from the source)."""
    for name, module in cli.COMMANDS.items():
        tree = ast.parse((REPO / "src" / "moekit" / "commands" / f"{module}.py").read_text())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert {"add_arguments", "run"} <= defined, name
        assert cli.command_help(module), f"moekit.commands.{module} has no HELP"
    code = (
        "import contextlib, io, sys\nfrom moekit import cli\nwith contextlib.redirect_stdout(io.StringIO()):\n"
        "    cli.main(['config', 'groups'])\nprint(sorted(m for m in sys.modules if m.startswith('moekit.commands.')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "['moekit.commands.config']", proc.stdout + proc.stderr


@pytest.mark.integration
def test_a_command_imports_only_its_own_dependencies():
    train = imported("train", "experiment=smoke", "--dry-run")
    assert {"hydra", "pydantic"} <= train and not train & {"jsonschema", "matplotlib", "jax", "maxtext"}
    render = imported("render", "experiment=smoke", "target=jobset")
    assert "jsonschema" not in render and "matplotlib" not in render  # only --check validates
    assert "jsonschema" in imported("render", "experiment=smoke", "target=jobset", "--check")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.integration
def test_gpu_wheel_list_covers_every_import_of_the_gpu_side_commands():
    listed = {
        _canonical(line.split("==")[0])
        for line in (REPO / "benchmarks" / "h200" / "wheels.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    present = dependency_closure(ON_THE_MACHINE)
    owners = md.packages_distributions()
    modules = set().union(*(imported(*args) for args in GPU_SIDE)) - set(sys.stdlib_module_names) - set(OPTIONAL)
    missing = {}
    for module in sorted(modules):
        dists = {_canonical(d) for d in owners.get(module, [])} - {"moekit"}
        if dists and not dists & (listed | present):
            missing[module] = sorted(dists)
    assert not missing, f"imported on the GPU machine but neither in wheels.txt nor there already: {missing}"


def test_wheel_list_and_stub_need_nothing_outside_the_repository():
    text = (REPO / "benchmarks" / "h200" / "run.sh").read_text()
    assert "../shared" not in text and "benchmarks/h200/stubs" in text
    stubs = REPO / "benchmarks" / "h200" / "stubs"
    probe = (
        "import xprof; from xprof.cli.tools import get_kernel_stats_tool\n"  # what tokamax imports
        "try:\n    get_kernel_stats_tool()\nexcept NotImplementedError:\n    print(xprof.__file__)"
    )
    out = subprocess.run([sys.executable, "-c", probe], env={"PYTHONPATH": str(stubs)}, capture_output=True, text=True)
    assert out.stdout.strip() == str(stubs / "xprof" / "__init__.py"), out.stderr


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
    assert proc.stderr.strip().splitlines()[-1] in ("rc=141", "rc=0") and "Traceback" not in proc.stderr, proc.stderr


def test_subcommands_with_their_own_subcommands_still_parse():
    args = cli.parse(["bench", "gmm", "--experts", "4"])
    assert args.command == "bench" and args.bench == "gmm" and args.experts == 4
