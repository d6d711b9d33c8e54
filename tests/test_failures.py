"""Failure semantics: classification, the group ends with its first failure, bounded rendezvous, manifests."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, moekit
from moekit import failures, launch
from moekit import rendezvous as rz

OOM_XLA = (
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
    "17179869184 bytes."
)
NCCL = "jaxlib._jax.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_api.cc:612: NCCL operation "
NCCL_SYS = "ncclSystemError: System call (e.g. socket, malloc) or external library call failed"
RENDEZVOUS = (
    "F1203 06:54:03.179414 12494 client.h:86] Terminating process because the JAX distributed service detected "
    "fatal errors. absl::Status: DEADLINE_EXCEEDED: Deadline Exceeded\n\nRPC: "
    "/xla.coordination.CoordinationService/RegisterTask"
)
CONFIG = (
    'Traceback (most recent call last):\n  File "/venv/lib/python3.12/site-packages/maxtext/configs/pyconfig.py", '
    "line 580, in initialize\npydantic_core._pydantic_core.ValidationError: 1 validation error for MaxTextConfig"
)

CASES = [  # id, returncode, log tail, class
    ("xla-oom", 1, "step 3\n" + OOM_XLA, "out_of_memory"),
    ("cuda-oom", -6, "CUDA_ERROR_OUT_OF_MEMORY: out of memory", "out_of_memory"),
    ("oom-killer-with-message", -9, "MemoryError", "out_of_memory"),
    ("nccl-op", 1, NCCL + "failed: unhandled cuda error", "nccl_error"),
    ("nccl-system", 1, NCCL_SYS, "nccl_error"),
    ("nccl-warn", 134, "node3:123:456 [0] NCCL WARN NET/IB : Got completion with error 12", "nccl_error"),
    ("rendezvous-abort", -6, RENDEZVOUS, "rendezvous_timeout"),
    (
        "never-joined",
        -11,
        f"{failures.JOINING} at 10.0.0.1:12355 as process 3 of 8 (timeout 300 s)\nSegmentation fault",
        "rendezvous_timeout",
    ),
    ("maxtext-config", 1, CONFIG, "configuration_error"),
    (
        "steps-done",
        1,
        "RuntimeError: Requested training up to step 10, but a checkpoint already exists",
        "configuration_error",
    ),
    ("sigkill", -9, "completed step: 4, seconds: 0.1, loss: 10.2", "killed"),
    ("shell-sigterm", 143, "", "killed"),
    ("joined-then-killed", -9, f"{failures.JOINING} at a:1 as process 0 of 2\n{failures.JOINED}\n", "killed"),
    ("python-error", 1, "Traceback (most recent call last):\nZeroDivisionError: division by zero", "error"),
]


@pytest.mark.parametrize("case, code, tail, expected", CASES, ids=[c[0] for c in CASES])
def test_classify(case, code, tail, expected):
    got = failures.classify(code, tail)
    assert got.name == expected, got
    assert got.evidence and got.returncode == code
    assert got.doc.startswith("docs/troubleshooting.md#")


def test_every_class_has_a_troubleshooting_section():
    text = (REPO / "docs" / "troubleshooting.md").read_text()
    anchors = {failures.anchor(h) for h in re.findall(r"^## (.+)$", text, flags=re.M)}
    for cls in failures.ALL:
        assert failures.anchor(cls.title) in anchors, f"docs/troubleshooting.md has no section for {cls.title!r}"


def test_signal_of():
    assert failures.signal_of(-9) == signal.SIGKILL
    assert failures.signal_of(137) == signal.SIGKILL
    assert failures.signal_of(1) is None


@pytest.mark.integration
def test_one_failed_process_ends_the_group(tmp_path):
    """A member exiting non-zero stops the rest: no process is left waiting for a peer that is gone."""
    specs = [
        launch.ProcessSpec([sys.executable, "-c", "import time; time.sleep(600)"], {}, tmp_path / "a.log"),
        launch.ProcessSpec([sys.executable, "-c", "import sys; print('bad'); sys.exit(3)"], {}, tmp_path / "b.log"),
    ]
    start = time.monotonic()
    out = launch.run(specs, grace_s=5)
    assert time.monotonic() - start < 30
    assert out.failed_rank == 1 and out.returncodes[1] == 3
    assert out.returncodes[0] == -signal.SIGTERM


@pytest.mark.integration
def test_rendezvous_is_bounded_and_classified(tmp_path):
    """Processes 0 and 1 of a 3-process job wait for process 2, which never comes: both fail within the
    timeout (plus start-up) with the rendezvous-timeout class instead of hanging."""
    timeout_s = 5
    specs = []
    for pid in (0, 1):
        env = {
            "PATH": "/usr/bin:/bin",
            "JAX_PLATFORMS": "cpu",
            rz.COORDINATOR: "127.0.0.1:29731",
            rz.NUM_PROCESSES: "3",
            rz.PROCESS_ID: str(pid),
            rz.TIMEOUT: str(timeout_s),
        }
        argv = [sys.executable, "-m", "moekit.worker", "maxtext.trainers.pre_train.train"]
        specs.append(launch.ProcessSpec(argv, env, tmp_path / f"{pid}.log"))
    start = time.monotonic()
    out = launch.run(specs, grace_s=5)
    elapsed = time.monotonic() - start
    assert out.failed_rank is not None
    assert elapsed < 120, f"rendezvous took {elapsed:.0f} s with a {timeout_s} s timeout"
    log = specs[out.failed_rank].log.read_text()
    got = failures.classify(out.returncodes[out.failed_rank], log)
    assert got.name == "rendezvous_timeout", (got, log[-2000:])


@pytest.mark.integration
def test_failed_training_writes_a_classified_manifest(tmp_path):
    """MaxText rejects a raw key at start-up: moekit exits non-zero and records the class and where to read."""
    run = tmp_path / "run"
    proc = moekit("train", "experiment=smoke", "maxtext.extra.no_such_maxtext_key=1", f"run.dir={run}")
    assert proc.returncode == 1
    assert "training failed: configuration error" in proc.stderr
    assert "docs/troubleshooting.md#configuration-error" in proc.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["failure"]["class"] == "configuration_error"
    assert manifest["failure"]["help"] == "docs/troubleshooting.md#configuration-error"
    assert manifest["attempts"][-1]["status"] == "failed"
    assert not list(run.glob(".manifest.json.*")), "a temporary file was left behind"


@pytest.mark.integration
def test_sigterm_stops_the_processes_and_is_recorded(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moekit", "train", "experiment=smoke", f"run.dir={run}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (run / "maxtext.log").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["failure"]["class"] == "killed"
    assert "SIGTERM" in manifest["failure"]["evidence"]


def test_troubleshooting_doc_is_linked_from_readme():
    assert "docs/troubleshooting.md" in Path(REPO / "README.md").read_text()
