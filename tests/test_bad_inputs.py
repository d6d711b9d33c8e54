"""What a user can get wrong, through the real command line: each case names the problem and the fix, exits
non-zero without a traceback, launches nothing and changes no file (every file under the test's folder is
compared before and after)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, compose, moekit
from moekit import redact

S = ["train", "experiment=smoke"]

# id, command line ({tmp} is the test's folder), words naming the problem, words of the fix.
CASES = [
    # malformed or unknown overrides
    ("override-without-value", [*S, "train.steps"], "is not key=value", "train.steps=20"),
    ("override-without-key", [*S, "=3"], "is not key=value", "write it as a.b=VALUE"),
    ("override-bad-syntax", [*S, "train.steps=[1,"], "could not compose", "write each override as key=value"),
    ("unknown-key", [*S, "train.stepz=3"], "unknown config key 'train.stepz'", "correct the spelling"),
    ("unknown-section", [*S, "foo.bar=1"], "foo is not a section", "correct the spelling"),
    ("unknown-moe-option", [*S, "moe=fast"], "valid options for moe=", "pick one of them"),
    ("unknown-experiment", ["train", "experiment=nope"], "valid options for experiment=", "e.g. experiment="),
    ("unknown-hardware", [*S, "hardware=tpu"], "valid options for hardware=", "pick one of them"),
    # wrong types and ranges
    ("steps-not-int", [*S, "train.steps=ten"], "valid integer", "e.g. train.steps=10"),
    ("batch-not-number", [*S, "train.per_device_batch_size=abc"], "per_device_batch_size", "e.g."),
    ("steps-zero", [*S, "train.steps=0"], "greater than or equal to 1", "give train.steps a value"),
    ("seq-too-short", [*S, "train.seq_len=4"], "greater than or equal to 8", "e.g. train.seq_len=128"),
    ("precision-name", [*S, "precision.name=fp4"], "'fp32', 'bf16', 'fp8' or 'mxfp8'", "give precision.name"),
    ("port-range", [*S, "cluster.coordinator_port=70000"], "less than or equal to 65535", "coordinator_port="),
    ("no-experts", [*S, "model.num_experts=0"], "greater than or equal to 1", "model.num_experts"),
    ("top-k-over-experts", [*S, "model.experts_per_token=16"], "exceeds num_experts=8", "change the model keys"),
    ("checkpoint-negative", [*S, "checkpoint.every=-1"], "greater than or equal to 0", "checkpoint.every"),
    # impossible meshes, experts vs EP, batch divisibility
    ("axis-zero", [*S, "parallelism.ici.expert=0"], "an axis is a positive size", "parallelism.ici"),
    ("two-fill-axes", [*S, "parallelism.ici.data=-1"], "more than one axis is -1", "at most one ICI axis"),
    ("dcn-fill", [*S, "parallelism.dcn.data=-1"], "not supported across slices", "set every DCN axis"),
    (
        "mesh-product",
        [*S, "cluster.processes_per_node=2", "parallelism.ici.fsdp=3"],
        "does not match 2 devices",
        "parallelism.ici.fsdp=-1",
    ),
    (
        "experts-vs-ep",
        [*S, "cluster.gpus_per_node=3", "parallelism.ici.fsdp=1", "parallelism.ici.expert=3"],
        "8 experts do not divide evenly over expert parallelism 3",
        "parallelism.ici.expert=1",
    ),
    ("batch-fraction", [*S, "train.per_device_batch_size=0.3"], "not a whole number", "per-device batch"),
    (
        "batch-over-dp",
        [*S, "cluster.processes_per_node=2", "train.per_device_batch_size=0.5", "parallelism.ici.fsdp=2"],
        "does not divide over 2 data-parallel ranks",
        "multiple of 2",
    ),
    (
        "processes-per-gpu",
        [*S, "hardware=h200", "moe=tokamax", "cluster.gpus_per_node=8", "cluster.processes_per_node=4"],
        "one process per node or one per GPU",
        "cluster.processes_per_node=8",
    ),
    ("local-multinode", [*S, "cluster.nodes=2"], "runs on one host", "cluster=jobset"),
    (
        "coordinator-port-taken",
        [*S, "cluster.processes_per_node=2", "cluster.coordinator_port={port}"],
        "is in use on this host",
        "(a free port)",
    ),
    ("jobset-outside-pod", [*S, "cluster=jobset", "cluster.gpus_per_node=1"], "MOEKIT_COORDINATOR_HOST", "render"),
    # hardware features, token dropping
    ("mxfp8-on-hopper", [*S, "hardware=h200", "precision=mxfp8", "moe=tokamax"], "Blackwell", "precision=fp8"),
    ("fp8-on-cpu", [*S, "precision=fp8"], "FP8 tensor cores", "precision=bf16"),
    ("gpu-config-without-gpu", [*S, "hardware=h200", "moe=tokamax"], "needs NVIDIA GPUs", "hardware=cpu"),
    ("megablox-on-gpu", [*S, "hardware=h200", "moe=megablox"], "interpret mode", "moe=tokamax"),
    ("capacity-drops", [*S, "moe=capacity"], "drops tokens", "moe.allow_token_dropping=true"),
    ("capacity-factor", [*S, "moe.capacity_factor=1.25"], "not dropless", "dropless back end"),
    # JobSet names and namespaces (render)
    (
        "jobset-name-case",
        ["render", "experiment=smoke", "target=jobset", "cluster.name=Bad_Name"],
        "not a DNS-1035 label",
        "cluster.name=bad-name",
    ),
    (
        "jobset-name-length",
        ["render", "experiment=smoke", "target=jobset", "cluster.name=" + "a" * 30],
        "at most 25 characters",
        "cluster.name=" + "a" * 25,
    ),
    (
        "jobset-namespace",
        ["render", "experiment=smoke", "target=jobset", "cluster.namespace=Team/ML"],
        "not a DNS-1123 label",
        "cluster.namespace=default",
    ),
    ("render-no-target", ["render", "experiment=smoke"], "choose one target", "target=jobset"),
    (
        "jobset-inline-secret",
        ["render", "experiment=smoke", "target=jobset", "cluster.env.HF_TOKEN=hf_abcdef123"],
        "secret value would be written in plain text",
        "cluster.secrets=[{env: HF_TOKEN",
    ),
    # run directories (train run.dir=...)
    ("run-dir-is-file", [*S, "run.dir={tmp}/a-file"], "is a file, not a directory", "choose a new run.dir"),
    ("run-dir-not-a-run", [*S, "run.dir={tmp}/notes"], "not a moekit run directory", "choose a new run.dir"),
    ("run-dir-finished", [*S, "run.dir={tmp}/finished"], "holds a finished run", "choose a new run.dir"),
    ("run-dir-corrupt-manifest", [*S, "run.dir={tmp}/corrupt"], "manifest.json is corrupt", "choose a new run.dir"),
    (
        "run-dir-other-config",
        [*S, "run.dir={tmp}/other"],
        "different configuration (train.steps: 3 -> 10)",
        "resume with the overrides it was started with",
    ),
    ("run-dir-in-use", [*S, "run.dir={tmp}/busy"], "in use by another `moekit train`", "wait for it to end"),
    # report on missing, damaged or empty runs
    ("report-missing", ["report", "{tmp}/missing"], "is not a directory", "moekit train"),
    ("report-not-a-run", ["report", "{tmp}/notes"], "not a moekit run directory", "moekit train"),
    ("report-no-metrics", ["report", "{tmp}/nometrics"], "no metrics file", "maxtext.log"),
    ("report-empty-run", ["report", "{tmp}/emptyrun"], "holds no completed step", "maxtext.log"),
    ("report-corrupt-metrics", ["report", "{tmp}/corruptmetrics"], "is not a MaxText metrics record", "corrupt"),
    # the command line itself
    ("unknown-command", ["trian"], "invalid choice: 'trian'", "choose from"),
    ("dry-run-format", [*S, "--dry-run", "--format", "xml"], "invalid choice: 'xml'", "choose from"),
]


def _config_yaml(overrides: list[str]) -> str:
    return yaml.safe_dump(redact.redact_tree(compose("smoke", overrides).to_dict()), sort_keys=False)


def _manifest(status: str) -> str:
    return json.dumps({"status": status, "overrides": ["experiment=smoke"]})


def _populate(tmp: Path) -> None:
    """Run directories in every state a user can point at."""
    (tmp / "a-file").write_text("not a directory\n")
    (tmp / "notes").mkdir()
    (tmp / "notes" / "todo.txt").write_text("my notes\n")
    step = {"step": 0, "learning/loss": 10.0, "perf/step_time_seconds": 1.0}
    for name, status, overrides in [
        ("finished", "ok", []),
        ("other", "failed", ["train.steps=3"]),
        ("busy", "failed", [f"run.dir={tmp}/busy"]),
        ("nometrics", "failed", []),
        ("emptyrun", "failed", []),
        ("corruptmetrics", "ok", []),
    ]:
        d = tmp / name
        d.mkdir()
        (d / "manifest.json").write_text(_manifest(status))
        (d / "config.yaml").write_text(_config_yaml(overrides))
    (tmp / "finished" / "metrics.jsonl").write_text(json.dumps(step) + "\n")
    (tmp / "emptyrun" / "metrics.jsonl").write_text("")
    (tmp / "corruptmetrics" / "metrics.jsonl").write_text(json.dumps(step) + "\n{garbage\n" + json.dumps(step) + "\n")
    (tmp / "corrupt").mkdir()
    (tmp / "corrupt" / "manifest.json").write_text('{"status": "runn')
    (tmp / "corrupt" / "config.yaml").write_text(_config_yaml([]))


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def playground(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-inputs")
    _populate(tmp)
    return tmp


@pytest.mark.parametrize("case, argv, problem, fix", CASES, ids=[c[0] for c in CASES])
def test_bad_input(case, argv, problem, fix, playground):
    if case == "gpu-config-without-gpu" and Path("/dev/nvidia0").exists():
        pytest.skip("this host has a GPU")
    taken = socket.socket()  # a port another job listens on
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = str(taken.getsockname()[1])
    argv = [a.replace("{tmp}", str(playground)).replace("{port}", port) for a in argv]
    if argv[0] == "train":
        argv.append(f"run.base_dir={playground}/outputs")
    before = _snapshot(playground)
    lock = None
    if case == "run-dir-in-use":  # another `moekit train` holds the run
        lock = os.open(playground / "busy" / ".moekit.lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        proc = moekit(*argv, timeout=120)
    finally:
        taken.close()
        if lock is not None:
            os.close(lock)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Traceback" not in out
    assert problem in out, out
    assert fix in out, out
    after = _snapshot(playground)
    after.pop("busy/.moekit.lock", None)
    before.pop("busy/.moekit.lock", None)
    assert after == before, "a file was written or changed"
    assert not (playground / "outputs").exists(), "a run directory was created"


def test_the_table_is_large_enough():
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)


# ---- `make smoke` on a machine without Python >= 3.12 ----


def _bin_without_python312(tmp: Path) -> Path:
    """A PATH with the tools `make smoke` needs and only an old python3 (or none)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "cat", "env"):
        (bin_dir / tool).symlink_to(Path("/usr/bin") / tool if Path(f"/usr/bin/{tool}").exists() else f"/bin/{tool}")
    old = Path("/usr/bin/python3")
    if old.exists():
        (bin_dir / "python3").symlink_to(old)  # Debian 12: 3.11, too old for MaxText 0.2.5
    return bin_dir


def _old_or_no_python() -> None:
    probe = (
        subprocess.run(
            ["/usr/bin/python3", "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True, text=True
        )
        if Path("/usr/bin/python3").exists()
        else None
    )
    if probe is not None and probe.stdout.strip() == "True":
        pytest.skip("/usr/bin/python3 is already >= 3.12 here")


def test_find_python_explains_what_to_install(tmp_path):
    _old_or_no_python()
    env = {
        "PATH": str(_bin_without_python312(tmp_path)),
        "PYENV_ROOT": str(tmp_path / "no-pyenv"),
        "HOME": str(tmp_path),
    }
    proc = subprocess.run([str(REPO / "scripts" / "find-python")], capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "needs Python >= 3.12" in proc.stderr and "pyenv install 3.12" in proc.stderr


def test_find_python_rejects_a_wrong_PYTHON(tmp_path):
    env = {"PATH": str(_bin_without_python312(tmp_path)), "PYTHON": str(tmp_path / "python9"), "HOME": str(tmp_path)}
    proc = subprocess.run([str(REPO / "scripts" / "find-python")], capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode != 0
    assert "is not a runnable Python >= 3.12" in proc.stderr


def test_make_smoke_without_python312_creates_nothing(tmp_path):
    _old_or_no_python()
    venv = tmp_path / "venv"
    env = {
        "PATH": str(_bin_without_python312(tmp_path)),
        "PYENV_ROOT": str(tmp_path / "no-pyenv"),
        "HOME": str(tmp_path),
    }
    proc = subprocess.run(
        ["/usr/bin/make", "-C", str(REPO), "smoke", f"VENV={venv}"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode != 0
    assert "needs Python >= 3.12" in proc.stderr and "make smoke PYTHON=" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not venv.exists()


def test_fewer_gpus_than_configured(tmp_path):
    from moekit.commands.train import ensure_gpus_present
    from moekit.errors import MoekitError

    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    cfg = compose("smoke", ["hardware=h200", "moe=tokamax", "cluster.gpus_per_node=8", "cluster.processes_per_node=8"])
    with pytest.raises(MoekitError, match=r"gpus_per_node=8, but this host has 2 GPU\(s\).*gpus_per_node=2"):
        ensure_gpus_present(cfg, tmp_path)
    ensure_gpus_present(compose("smoke", ["hardware=h200", "moe=tokamax", "cluster.gpus_per_node=2"]), tmp_path)


def test_te_backend_without_transformer_engine():
    # This environment has no TransformerEngine (the CPU stack): moe=te must stop before launching.
    import importlib.util

    from moekit.commands.train import ensure_te_present
    from moekit.errors import MoekitError

    assert importlib.util.find_spec("transformer_engine") is None
    with pytest.raises(MoekitError, match=r"moe=te runs TransformerEngine.*nothing was launched.*moe=tokamax"):
        ensure_te_present(compose("dsv3_proxy_h200", ["moe=te"]))
    ensure_te_present(compose("dsv3_proxy_h200", []))  # other back ends need no TE
