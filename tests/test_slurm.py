"""`moekit render ... target=slurm`: the script's structure, and real jobs on a one-host Slurm cluster.

The pure tests parse the rendered script (bash -n, the #SBATCH set, srun's argv as bash hands it over).
The integration tests submit rendered CPU scripts (cluster.container=none) with sbatch to the cluster of
tests/slurm_cluster.py and wait for the job: both task layouts train the smoke model to the local
2-process losses, a failed task ends the step and the job, and a GPU script's request passes
`sbatch --test-only`. What only a pyxis GPU cluster can show is listed in docs/slurm.md.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TWO_PROCESS_OVERRIDES, free_port, losses, moekit, recorded_steps
from moekit.base.failures import JOINED
from moekit.commands import render as cmd
from moekit.render import slurm as render_slurm
from moekit.rundir import LAUNCHERS

BIN = Path(sys.executable).parent


def sbatch_lines(text: str) -> list[str]:
    """The #SBATCH options as sbatch reads them: words after '#SBATCH ', quotes removed."""
    return [w for line in text.splitlines() if line.startswith("#SBATCH ") for w in shlex.split(line[8:])]


def srun_argv(text: str) -> list[str]:
    (line,) = [s for s in text.splitlines() if s.startswith("srun ")]
    return shlex.split(line.removesuffix(" &"))


# ---- the rendered script (pure) ----


def test_gpu_script_has_what_a_pyxis_cluster_needs(tmp_path):
    overrides = ["experiment=smoke_gpu", "target=slurm", "cluster.processes_per_node=8", "network=ib"]
    text, cfg, _ = cmd.render([*overrides, "cluster.partition=gpu", "cluster.image='nvcr.io#acme/moekit:1.0'"])
    assert set(sbatch_lines(text)) == {
        "--job-name=smoke-gpu",
        "--nodes=2",
        "--ntasks-per-node=8",  # one task per GPU: TE's NCCL EP binds one rank per GPU
        "--gpus-per-node=8",
        "--exclusive",
        "--time=02:00:00",
        "--requeue",
        "--signal=B:TERM@300",
        "--output=smoke-gpu-%j.out",
        "--open-mode=append",
        "--partition=gpu",
    }
    argv = srun_argv(text)
    assert argv[:3] == ["srun", "--ntasks-per-node=8", "--kill-on-bad-exit=1"]
    assert "--container-image=nvcr.io#acme/moekit:1.0" in argv
    assert "--container-mounts=${SLURM_SUBMIT_DIR}:/workspace" in argv  # expanded by bash at run time
    assert "--container-workdir=/workspace" in argv
    i = argv.index(render_slurm.ENTRYPOINT)
    assert argv[i + 1 : i + 4] == ["train", "experiment=smoke_gpu", "cluster=slurm"]
    assert argv[-1] == "run.dir=outputs/smoke_gpu/slurm-${SLURM_JOB_ID}"
    assert "export NCCL_IB_DISABLE=0" in text.splitlines()
    assert "trap 'trapped=1; scancel --signal=TERM \"${SLURM_JOB_ID}\"' TERM" in text
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def test_entrypoint_is_the_images():
    """pyxis does not run the image's ENTRYPOINT, so the script names it; it must be the Dockerfile's."""
    line = next(x for x in (REPO / "Dockerfile").read_text().splitlines() if x.startswith("ENTRYPOINT"))
    assert json.loads(line.removeprefix("ENTRYPOINT").strip()) == [render_slurm.ENTRYPOINT]


def test_layouts_and_policy_keys():
    per_node, *_ = cmd.render(
        ["experiment=smoke_gpu", "target=slurm", "cluster.processes_per_node=8", "cluster.task_layout=per_node"]
    )
    assert "--ntasks-per-node=1" in sbatch_lines(per_node) and "--ntasks-per-node=1" in srun_argv(per_node)
    bare, *_ = cmd.render(
        ["experiment=smoke", "target=slurm", "cluster.container=none", "cluster.requeue=false"]
        + ["cluster.signal_grace_s=90", "run.dir=/shared/runs/a"]
    )
    assert "--requeue" not in sbatch_lines(bare) and "--signal=B:TERM@90" in sbatch_lines(bare)
    assert not any(o.startswith("--gpus") for o in sbatch_lines(bare))
    argv = srun_argv(bare)
    assert not any(a.startswith("--container") for a in argv)
    assert argv[argv.index("moekit") : argv.index("moekit") + 4] == [
        "moekit",
        "train",
        "experiment=smoke",
        "cluster=slurm",
    ]
    assert argv[-1] == "run.dir=/shared/runs/a"  # the user's, not a second one


def doc_render_commands() -> list[list[str]]:
    """The `moekit render` commands of docs/slurm.md's code blocks (continued lines joined)."""
    text = (REPO / "docs" / "slurm.md").read_text().replace("\\\n", " ")
    blocks = text.split("```")[1::2]
    return [shlex.split(line)[2:] for b in blocks for line in b.splitlines() if line.startswith("moekit render ")]


def test_the_docs_render_commands_render(tmp_path):
    commands = doc_render_commands()
    assert len(commands) >= 3
    for words in commands:
        words = [w for i, w in enumerate(words) if w != "-o" and (i == 0 or words[i - 1] != "-o")]
        text, _, _ = cmd.render(words)
        assert sbatch_lines(text) and srun_argv(text)


def _fake(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


def test_script_hands_srun_the_words_as_configured(tmp_path):
    """Hostile values reach srun as single words, and nothing in them runs (bash executes the script, with
    stand-ins for srun and scancel that record their argv)."""
    hostile = 'x;$(touch PWNED) `touch PWNED` "c" &|<> *'  # (an image reference is refused at validation)
    workdir = "/w" + hostile
    text, _, _ = cmd.render(
        ["experiment=smoke", "target=slurm", f"cluster.container_workdir='{workdir}'", f"run.name='{hostile}'"]
        + ["cluster.container_mounts=[/data:/data:ro]"]
    )
    fakes = tmp_path / "bin"
    fakes.mkdir()
    _fake(fakes, "srun", 'printf "%s\\0" "$@" > srun.argv\nexit 3\n')
    env = {"PATH": f"{fakes}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": "/home/u/my job", "SLURM_JOB_ID": "42"}
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr  # the step's status is the job's
    argv = (tmp_path / "srun.argv").read_text().split("\0")[:-1]
    assert f"--container-workdir={workdir}" in argv
    assert f"--container-mounts=/home/u/my job:{workdir},/data:/data:ro" in argv
    assert f"run.name='{hostile}'" in argv  # the override as given, for Hydra to read
    assert argv[-1] == "run.dir=outputs/smoke/slurm-42"
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize("end, status", [("exit 0", 0), ("exit 3", 3), ("kill -KILL $$", 137)])
def test_script_exits_with_the_steps_status(tmp_path, end, status):
    text, _, _ = cmd.render(["experiment=smoke", "target=slurm", "cluster.container=none"])
    fakes = tmp_path / "bin"
    fakes.mkdir()
    _fake(fakes, "srun", end + "\n")
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    env = {"PATH": f"{fakes}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "42"}
    assert subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, timeout=30).returncode == status


def test_script_passes_the_time_limit_signal_to_the_tasks(tmp_path):
    """SIGTERM to the batch shell (--signal=B:TERM) becomes `scancel --signal=TERM <job>` for the tasks; the
    shell then waits for the step and exits with its status."""
    text, _, _ = cmd.render(["experiment=smoke", "target=slurm", "cluster.container=none"])
    fakes = tmp_path / "bin"
    fakes.mkdir()
    _fake(fakes, "srun", "trap 'exit 7' TERM\necho $$ > srun.pid\nwhile true; do sleep 0.1; done\n")
    _fake(fakes, "scancel", 'echo "$@" > scancel.args\nkill -TERM "$(cat srun.pid)"\n')
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    env = {"PATH": f"{fakes}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "42"}
    shell = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env)
    deadline = time.monotonic() + 30
    while not (tmp_path / "srun.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    shell.send_signal(signal.SIGTERM)
    assert shell.wait(timeout=30) == 7
    assert (tmp_path / "scancel.args").read_text().split() == ["--signal=TERM", "42"]


# ---- real jobs on the one-host cluster ----


def _submit(slurm, folder: Path, *overrides: str, timeout_s: float = 420) -> tuple[str, dict[str, str], str]:
    """Render a CPU script for this cluster (no containers), sbatch it from `folder`, wait for the job's end.

    Returns (job id, final `scontrol show job` record, the job's output file)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "job.sbatch"
    proc = moekit(
        "render",
        "experiment=smoke",
        "target=slurm",
        "cluster.container=none",
        "cluster.nodes=1",
        f"cluster.coordinator_port={free_port()}",  # other runs on this machine may hold the default
        *overrides,
        "-o",
        str(script),
    )
    assert proc.returncode == 0, proc.stderr
    job = slurm.sbatch(script, cwd=folder, env={"PATH": f"{BIN}:{os.environ['PATH']}"})
    info = slurm.wait(job, timeout_s)
    return job, info, (folder / f"smoke-{job}.out").read_text(errors="replace")


SMOKE_2 = (*TWO_PROCESS_OVERRIDES, "cluster.processes_per_node=2", "cluster.gpus_per_node=2")


@pytest.mark.integration
@pytest.mark.parametrize("layout", [pytest.param("per_process", marks=pytest.mark.soak), "per_node"])
def test_job_trains_like_the_local_two_process_run(slurm, tmp_path, local_two_process_run, layout):
    """Both task layouts: Slurm's environment gives the ranks, and the losses are the local run's."""
    job, info, out = _submit(slurm, tmp_path, *SMOKE_2, f"cluster.task_layout={layout}")
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), out[-4000:] + slurm.logs()
    run = tmp_path / "outputs" / "smoke" / f"slurm-{job}"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 6 and json.loads((run / "manifest.json").read_text())["status"] == "ok"
    procs = json.loads((run / "job.json").read_text())["processes"]
    if layout == "per_process":  # one moekit per task: process 1's keeps its records beside
        assert [p["JAX_PROCESS_ID"] for p in procs] == ["0"]
        other = run / LAUNCHERS / "1"
        assert [p["JAX_PROCESS_ID"] for p in json.loads((other / "job.json").read_text())["processes"]] == ["1"]
    else:
        assert [p["JAX_PROCESS_ID"] for p in procs] == ["0", "1"]
        other = run
    assert procs[0]["JAX_COORDINATOR_ADDRESS"].startswith(f"{slurm.node}:")
    fabric = json.loads((run / "fabric.json").read_text())  # the fabric phase ran in the allocation, process 0 wrote
    assert fabric["processes"] == 2 and fabric["results"] and not fabric["problems"], fabric
    local_dir, local = local_two_process_run
    assert local.returncode == 0, local.stderr[-2000:]
    assert losses(run) == losses(other, "metrics.1.jsonl") == losses(local_dir)


def _worker_pid(slurm, job: str, process_id: int) -> int | None:
    """The worker process of `process_id` in this cluster's job (other clusters on the machine have job ids too)."""
    want = {
        b"SLURM_CONF": str(slurm.conf).encode(),
        b"SLURM_JOB_ID": job.encode(),
        b"JAX_PROCESS_ID": b"%d" % process_id,
    }
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if b"moekit.worker" not in cmdline:
                continue
            env = dict(kv.split(b"=", 1) for kv in (proc / "environ").read_bytes().split(b"\0") if b"=" in kv)
        except (OSError, ValueError):
            continue
        if all(env.get(k) == v for k, v in want.items()):
            return int(proc.name)
    return None


@pytest.mark.integration
def test_a_failed_task_ends_the_step_and_the_job(slurm, tmp_path):
    """Process 1 is killed (as by the OOM killer) once it has joined: its task fails, srun's --kill-on-bad-exit
    stops task 0 at once (no wait at a collective), and the job is FAILED with a non-zero exit code."""
    folder = tmp_path / "job"
    folder.mkdir()
    script = folder / "job.sbatch"
    proc = moekit(
        "render", "experiment=smoke", "target=slurm", "cluster.container=none", "cluster.nodes=1",
        *SMOKE_2, "train.steps=1000", f"cluster.coordinator_port={free_port()}", "-o", str(script),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    job = slurm.sbatch(script, cwd=folder, env={"PATH": f"{BIN}:{os.environ['PATH']}"})
    log1 = folder / "outputs" / "smoke" / f"slurm-{job}" / LAUNCHERS / "1" / "maxtext.1.log"
    deadline = time.monotonic() + 300
    while not (log1.is_file() and JOINED in log1.read_text(errors="replace")):
        assert time.monotonic() < deadline and slurm.job(job)["JobState"] in ("PENDING", "RUNNING"), slurm.logs()
        time.sleep(1)
    pid = _worker_pid(slurm, job, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    info = slurm.wait(job, 120)
    ended = time.monotonic() - killed
    out = (folder / f"smoke-{job}.out").read_text(errors="replace")
    assert info["JobState"] == "FAILED" and info["ExitCode"] != "0:0", out[-3000:]
    assert ended < 60, f"the step took {ended:.0f} s to end after its task failed"
    assert "task 1: Exited with exit code 1" in out
    run = folder / "outputs" / "smoke" / f"slurm-{job}"
    failed = json.loads((run / LAUNCHERS / "1" / "manifest.json").read_text())
    assert failed["status"] == "failed" and failed["failure"]["class"] == "killed", failed
    stopped = json.loads((run / "manifest.json").read_text())  # task 0, stopped by Slurm: told to stop from outside
    assert stopped["status"] == "preempted" and "SIGTERM" in stopped["failure"]["evidence"], stopped


@pytest.mark.integration
def test_gpu_scripts_pass_sbatch_test_only(slurm, tmp_path):
    """The GPU script's #SBATCH request (GPUs, --exclusive, --requeue, --signal, --open-mode) is one Slurm
    accepts and can place on a node with 8 GPUs; asking for more GPUs than the node has is refused."""
    for name, extra in [
        ("gpu8", ["network=ib"]),
        ("gpu2x2", ["cluster.gpus_per_node=2", "cluster.processes_per_node=2", "cluster.time_limit=00:30:00"]),
        ("cpu", ["experiment=smoke", "cluster.container=none"]),
    ]:
        script = tmp_path / f"{name}.sbatch"
        cmd_args = ["render", "experiment=smoke_gpu", "target=slurm", "cluster.nodes=1", *extra, "-o", str(script)]
        proc = moekit(*cmd_args)
        assert proc.returncode == 0, proc.stderr
        test = slurm.run("sbatch", "--test-only", str(script), cwd=tmp_path, check=False)
        assert test.returncode == 0 and "to start at" in test.stderr, (name, test.stderr)
    more = slurm.run("sbatch", "--test-only", "--gpus-per-node=9", str(tmp_path / "gpu8.sbatch"), check=False)
    assert more.returncode != 0 and "not available" in more.stderr


@pytest.mark.integration
@pytest.mark.soak
def test_a_requeued_job_resumes_from_its_preemption_checkpoint(slurm, tmp_path):
    """`scancel --signal=TERM` of a running job (the signal a time limit or a preemption gives the tasks): the
    worker saves at the next step and stops, the job ends FAILED with exit status 143; `scontrol requeue`
    puts it back in the queue with the same id, and it resumes from that checkpoint in the same run directory,
    losing at most one step. (A `scontrol requeue` of the running job signals the same way, then SIGKILLs
    after KillWait, 30 s: shorter than a step plus a save on this loaded 2-core machine.)"""
    folder = tmp_path / "job"
    folder.mkdir()
    script = folder / "job.sbatch"
    shared = tmp_path / "shared"  # a path every node sees (one node here)
    shared.mkdir()
    steps = 10
    proc = moekit(
        "render", "experiment=smoke", "target=slurm", "cluster.container=none", "cluster.nodes=1",
        "precision=fp32", f"train.steps={steps}", "checkpoint.every=1000", f"cluster.coordinator_port={free_port()}",
        f"cluster.volumes=[{{name: runs, path: {shared}}}]", "cluster.output=runs", "-o", str(script),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    job = slurm.sbatch(script, cwd=folder, env={"PATH": f"{BIN}:{os.environ['PATH']}"})
    run = shared / "smoke"  # <volume path>/<cluster.name or experiment>: the same for the requeued job
    deadline = time.monotonic() + 300
    while max(recorded_steps(run / "metrics.jsonl"), default=-1) < 3:
        assert time.monotonic() < deadline and slurm.job(job)["JobState"] in ("PENDING", "RUNNING"), slurm.logs()
        time.sleep(0.2)
    seen = max(recorded_steps(run / "metrics.jsonl"))
    slurm.run("scancel", "--signal=TERM", job)  # what the time-limit signal becomes in the script's trap
    signalled = time.monotonic()
    stopped = slurm.wait(job, 300)
    exit_s = time.monotonic() - signalled
    assert (stopped["JobState"], stopped["ExitCode"]) == ("FAILED", "143:0"), stopped
    slurm.run("scontrol", "requeue", job)  # as PreemptMode=REQUEUE or a requeue by hand: same id, same run.dir
    time.sleep(1)
    if slurm.job(job)["JobState"] == "PENDING":  # a requeued job waits for its begin time; let it start now
        slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
    info = slurm.wait(job, 400)
    out = (folder / f"smoke-{job}.out").read_text(errors="replace")
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), out[-4000:] + slurm.logs()
    manifest = json.loads((run / "manifest.json").read_text())
    assert [a["status"] for a in manifest["attempts"]] == ["preempted", "ok"], manifest
    record = manifest["attempts"][0]["preemption"]
    print(f"\nslurm: SIGTERM after step {seen}; {record}; the job ended {exit_s:.1f} s after scancel")
    assert record["checkpoint_saved"] and record["steps_lost"] <= 1, record
    assert manifest["resumed_from_checkpoint"] == record["checkpoint_step"]
    # One record per step, the step the preemption saved at included (test_preemption.py says how).
    merged = recorded_steps(run / "metrics.jsonl")
    assert merged == list(range(steps)), (merged, record["checkpoint_step"])
