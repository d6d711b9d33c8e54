"""Concurrent local runs on one host: each multi-process run coordinates on a port of its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import REPO, moekit
from moekit.rundir import records

# Tiny 2-process smoke runs: 8 steps leave steady steps after compile and warm-up.
SMALL = ("experiment=smoke", "cluster.processes_per_node=2", "train.steps=8", "train.per_device_batch_size=1")


@pytest.mark.integration
@pytest.mark.soak
def test_two_concurrent_two_process_runs(tmp_path):
    """Two 2-process runs started together (no port given) both finish with complete records, on two different
    coordinator ports, at steady speeds within 1.5x of each other (they share the host's cores evenly)."""
    runs = [tmp_path / "a", tmp_path / "b"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "moekit", "train", *SMALL, f"run.dir={run}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env=os.environ.copy(),
        )
        for run in runs
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    ports, rates = set(), []
    for run in runs:
        manifest = records.read_manifest(run)
        assert manifest.status == records.OK, manifest
        job = json.loads((run / "job.json").read_text())
        ports |= {p["JAX_COORDINATOR_ADDRESS"] for p in job["processes"]}
        for name in ("metrics.jsonl", "metrics.1.jsonl", "summary.json", "config.yaml", "versions.json"):
            assert (run / name).is_file(), f"{run / name} missing"
        steady = json.loads((run / "summary.json").read_text())["tokens_per_s_per_device"]
        assert steady, run
        rates.append(steady)
        fabric = json.loads((run / "fabric.json").read_text())
        assert fabric["results"] and not fabric["problems"], fabric
    assert len(ports) == 2, f"both runs coordinated on {ports}"
    assert max(rates) / min(rates) <= 1.5, f"steady tokens/s/device {rates}"


def test_a_taken_port_the_user_set_is_refused_before_launch(tmp_path):
    """cluster.coordinator_port set by the user and held by something else: exit 2 before anything is launched,
    with a free port suggested."""
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = moekit("train", *SMALL, f"cluster.coordinator_port={port}", f"run.dir={tmp_path / 'r'}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"port {port} is in use" in proc.stderr and "cluster.coordinator_port=" in proc.stderr
    assert "nothing was launched" in proc.stderr
    assert not (tmp_path / "r" / "job.json").exists()
