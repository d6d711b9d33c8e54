"""The container: the real Dockerfile linted and built, then trained in with `docker run` and compose.

The engine and the stand-in base image come from tests/engine.py (the NGC base cannot be pulled here).
The first run makes the stand-in (about 4-10 minutes); later runs find it in the engine's cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import engine as eng
import moekit
from conftest import REPO, losses

COMPOSE_FILES = sorted((REPO / "compose").glob("*.yaml"))
TWO_NODE = REPO / "compose" / "cpu_two_node.yaml"
CPU_LIMITS = REPO / "tests" / "compose_cpu_limits.yaml"
IMAGE = "moekit:test"


def _git_revision() -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


# ---- static checks: no engine needed ----


def test_hadolint_clean():
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "hadolint"), "Dockerfile"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_works_on_old_engines():
    text = (REPO / "Dockerfile").read_text()
    assert not text.lower().startswith("# syntax")  # a parser directive: only valid on the first line
    assert not [line for line in text.splitlines() if "<<" in line and not line.startswith("#")]  # heredocs
    assert "ARG BASE_IMAGE=ghcr.io/nvidia/jax:maxtext-" in text and "FROM ${BASE_IMAGE}" in text


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_config_valid(path):
    proc = subprocess.run([eng.COMPOSE, "-f", str(path), "config", "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_smoke_compose_asks_for_gpus_and_limits():
    svc = yaml.safe_load((REPO / "compose" / "smoke.yaml").read_text())["services"]["train"]
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert svc["ipc"] == "host" and svc["ulimits"] == {"memlock": -1, "stack": 64 * 2**20}
    assert svc["command"] == ["train", "experiment=smoke_gpu"]


def test_two_node_services_look_like_jobset_pods():
    """Same image and command everywhere; the env and host names from_jobset and render/jobset.py use."""
    from moekit.translate import rendezvous as rz

    cfg = subprocess.run([eng.COMPOSE, "-f", str(TWO_NODE), "config", "--format", "json"], capture_output=True)
    services = json.loads(cfg.stdout)["services"]
    assert len({json.dumps([s["image"], s["command"]]) for s in services.values()}) == 1
    for node, svc in enumerate(services[f"node-{i}"] for i in range(2)):
        env = svc["environment"]
        found = rz.from_jobset(env, processes_per_node=1, gpus_per_node=1, gpu=False)
        assert [(r.process_id, r.num_processes) for r in found] == [(node, 2)]
        assert f"{svc['hostname']}.{svc['domainname']}" in svc["networks"]["jobset"]["aliases"]
    assert services["node-0"]["hostname"] + "." + services["node-0"]["domainname"] == found[0].coordinator.split(":")[0]


def test_compose_render_gives_each_gpu_node_its_own_gpus():
    from moekit.commands import render

    text = render.render(["experiment=smoke_gpu", "target=compose", "cluster.nodes=2", "cluster.gpus_per_node=4"])[0]
    services = yaml.safe_load(text)["services"]
    ids = [s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for s in services.values()]
    assert ids == [["0", "1", "2", "3"], ["4", "5", "6", "7"]]
    assert all(s["ipc"] == "host" and s["command"][:2] == ["train", "experiment=smoke_gpu"] for s in services.values())


# ---- the engine: build the image, train in it ----


@pytest.fixture(scope="module")
def engine():
    reason = eng.unavailable()
    if reason:
        pytest.skip(reason)
    e = eng.Engine()
    e.start()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def image(engine):
    base = eng.ensure_standin(engine, log=lambda m: print(m, file=sys.stderr))
    engine.docker(
        "build",
        "--build-arg",
        f"BASE_IMAGE={base}",
        "--build-arg",
        f"MOEKIT_REVISION={_git_revision()}",
        "-t",
        IMAGE,
        str(REPO),
        timeout=1800,
    )
    yield IMAGE, base
    engine.docker("image", "prune", "--force", check=False)  # earlier builds' untagged layers


def _run_dir(stdout: str) -> str:
    return [s for s in stdout.splitlines() if s.startswith("moekit: run directory ")][-1].split()[-1]


@pytest.mark.integration
@pytest.mark.soak
def test_image_labels_and_stack(engine, image):
    tag, base = image
    labels = json.loads(engine.docker("image", "inspect", "--format", "{{json .Config.Labels}}", tag).stdout)
    assert labels["org.opencontainers.image.base.name"] == base
    assert labels["org.opencontainers.image.version"] == moekit.__version__
    # The base's JAX and MaxText are the ones in the image (pip added moekit, replaced nothing).
    probe = "from importlib.metadata import version as v; print(v('jax'), v('maxtext'), v('moekit'))"
    got = engine.docker("run", "--rm", tag, "python3", "-c", probe).stdout.split()
    was = engine.docker("run", "--rm", base, "python3", "-c", probe.replace(", v('moekit')", "")).stdout.split()
    assert got == [*was, moekit.__version__]


@pytest.mark.integration
@pytest.mark.soak
def test_docker_run_trains_smoke(engine, image, tmp_path):
    out = tmp_path / "outputs"
    out.mkdir()
    proc = engine.docker(
        "run", "--rm", "-v", f"{out}:/workspace/outputs", image[0], "train", "experiment=smoke", "train.steps=5",
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "step 4 (5/5 done)" in proc.stdout
    run = out / "smoke" / Path(_run_dir(proc.stdout)).name  # the container's outputs/ is the volume
    loss = losses(run)
    assert len(loss) == 5 and all(x == x for x in loss)
    assert json.loads((run / "summary.json").read_text())["steps"] == 5


@pytest.mark.integration
@pytest.mark.soak
def test_docker_run_render_and_dry_run(engine, image):
    proc = engine.docker("run", "--rm", image[0], "render", "experiment=smoke_gpu", "target=jobset", check=False)
    assert proc.returncode == 0, proc.stderr
    manifest = yaml.safe_load(proc.stdout)
    assert manifest["kind"] == "JobSet"
    dry = engine.docker("run", "--rm", image[0], "train", "experiment=smoke_gpu", "--dry-run", "--format", "json")
    assert "use_tokamax_gmm=true" in json.loads(dry.stdout)["maxtext_args"]


@pytest.mark.integration
@pytest.mark.soak
def test_entrypoint_names_keys_an_old_maxtext_lacks(engine, image):
    """An older MaxText (here: one whose config lacks use_tokamax_gmm) stops the run before training."""
    types = "$(python3 -c 'import maxtext.configs.types as t; print(t.__file__)')"
    script = (
        f"sed -i 's/^  use_tokamax_gmm:/  renamed_use_tokamax_gmm:/' {types} && "
        "exec /opt/moekit/entrypoints/moekit-entrypoint train experiment=smoke maxtext.extra.no_such_key=1"
    )
    proc = engine.docker("run", "--rm", "--entrypoint", "bash", image[0], "-c", script, check=False)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "use_tokamax_gmm (from moe=ragged_dot)" in proc.stderr and "too old" in proc.stderr
    assert "no_such_key" in proc.stderr and "Traceback" not in proc.stderr
    assert "moekit: " not in proc.stdout  # nothing launched


@pytest.mark.integration
@pytest.mark.soak
def test_two_node_compose_same_losses(engine, image, tmp_path):
    env = {"MOEKIT_IMAGE": image[0], "MOEKIT_RUNS": str(tmp_path)}
    files = ["-f", str(TWO_NODE), "-f", str(CPU_LIMITS), "-p", f"moekit-test-{tmp_path.name[-12:].lower()}"]
    for node in ("node-0", "node-1"):
        (tmp_path / node).mkdir()
    try:
        up = engine.compose(*files, "up", "--no-color", env=env, check=False)  # each node ends by itself
        codes = engine.compose(*files, "ps", "-a", "--format", "json", env=env, check=False).stdout
    finally:
        engine.compose(*files, "down", "--volumes", env=env, check=False)
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-2000:]
    rows = json.loads(codes) if codes.lstrip().startswith("[") else [json.loads(x) for x in codes.splitlines() if x]
    assert sorted((r["Service"], r["ExitCode"]) for r in rows) == [("node-0", 0), ("node-1", 0)], codes
    runs = {node: next((tmp_path / node / "smoke").iterdir()) for node in ("node-0", "node-1")}
    runs["node-1"] = runs["node-1"] / "launchers" / "1"  # process 1's launcher: records apart (rundir.LAUNCHERS)
    rank0, rank1 = losses(runs["node-0"]), losses(runs["node-1"], "metrics.1.jsonl")
    assert len(rank0) == 5 and rank0 == rank1
    fabric = json.loads((runs["node-0"] / "fabric.json").read_text())  # the fabric phase ran in both containers
    assert fabric["processes"] == 2 and fabric["results"] and not fabric["problems"], fabric
    job = json.loads((runs["node-1"] / "job.json").read_text())
    assert job["processes"][0]["JAX_COORDINATOR_ADDRESS"] == "smoke-workers-0-0.smoke:6002"
    assert job["processes"][0]["JAX_PROCESS_ID"] == "1"
