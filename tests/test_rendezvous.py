"""Rendezvous for local, JobSet and Slurm environments (pure functions over a given env)."""

from __future__ import annotations

import pytest

from moekit.translate import rendezvous as rz


def test_local_two_processes():
    got = rz.local(2, 12355)
    assert [r.process_id for r in got] == [0, 1]
    assert {r.coordinator for r in got} == {"127.0.0.1:12355"}
    assert rz.process_env(got[1], 60) == {
        "JAX_COORDINATOR_ADDRESS": "127.0.0.1:12355",
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "1",
        "MOEKIT_RENDEZVOUS_TIMEOUT_S": "60",
    }


def test_single_process_needs_no_env():
    assert rz.process_env(rz.local(1, 1)[0], 60) == {}


JOBSET = {
    "MOEKIT_COORDINATOR_HOST": "job-workers-0-0.job",
    "MOEKIT_COORDINATOR_PORT": "6002",
    "MOEKIT_NUM_NODES": "4",
    "JOB_COMPLETION_INDEX": "2",
}


def test_jobset_one_process_per_node():
    (r,) = rz.from_jobset(JOBSET, processes_per_node=1, gpus_per_node=8, gpu=True)
    assert (r.process_id, r.num_processes, r.local_device_ids) == (2, 4, None)
    assert r.coordinator == "job-workers-0-0.job:6002"


def test_jobset_one_process_per_gpu():
    got = rz.from_jobset(JOBSET, processes_per_node=4, gpus_per_node=4, gpu=True)
    assert [r.process_id for r in got] == [8, 9, 10, 11]
    assert [r.local_device_ids for r in got] == [(0,), (1,), (2,), (3,)]
    assert rz.process_env(got[3], 60)["JAX_LOCAL_DEVICE_IDS"] == "3"
    assert {r.num_processes for r in got} == {16}


@pytest.mark.parametrize("drop", ["MOEKIT_COORDINATOR_HOST", "MOEKIT_NUM_NODES", "JOB_COMPLETION_INDEX"])
def test_jobset_missing_env_is_a_clear_error(drop):
    env = {k: v for k, v in JOBSET.items() if k != drop}
    with pytest.raises(rz.RendezvousError, match=drop):
        rz.from_jobset(env, 1, 8, True)


def test_jobset_rank_out_of_range():
    with pytest.raises(rz.RendezvousError, match="outside 0..3"):
        rz.from_jobset(JOBSET | {"JOB_COMPLETION_INDEX": "4"}, 1, 8, True)


@pytest.mark.parametrize(
    "nodelist, first",
    [("gpu[003-005,9]", "gpu003"), ("node7", "node7"), ("a1,a2", "a1"), ("dgx-[12,14-15],cpu1", "dgx-12")],
)
def test_slurm_first_host(nodelist, first):
    env = {"SLURM_JOB_NUM_NODES": "3", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": nodelist}
    got = rz.from_slurm(env, 6002, processes_per_node=8, gpus_per_node=8, gpu=True, layout="per_node")
    assert got[0].coordinator == f"{first}:6002"
    assert [r.process_id for r in got] == list(range(8, 16))


# One srun task per process (cluster.task_layout=per_process): what srun gives task 9 of 2 nodes x 8.
TASK = {
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NTASKS": "16",
    "SLURM_PROCID": "9",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
    "SLURM_JOB_NODELIST": "gpu[07-08],spare3",
}


def test_slurm_task_per_process():
    (r,) = rz.from_slurm(TASK, 6002, processes_per_node=8, gpus_per_node=8, gpu=True, layout="per_process")
    assert (r.process_id, r.num_processes, r.node_rank, r.local_rank) == (9, 16, 1, 1)
    assert r.coordinator == "gpu07:6002" and r.local_device_ids == (1,)
    env = rz.process_env(r, 600)
    assert env[rz.PROCESS_ID] == "9" and env[rz.LOCAL_DEVICES] == "1"


def test_slurm_task_bound_to_one_gpu_drives_device_0():
    (r,) = rz.from_slurm(TASK | {"CUDA_VISIBLE_DEVICES": "5"}, 6002, 8, 8, True, "per_process")
    assert r.local_device_ids == (0,)


def test_slurm_task_on_cpu_uses_all_its_devices():
    (r,) = rz.from_slurm(TASK, 6002, 8, 8, gpu=False, layout="per_process")
    assert r.local_device_ids is None


@pytest.mark.parametrize(
    "change, match",
    [
        ({"SLURM_NTASKS": "2"}, "2 tasks on 2 node"),  # srun started one task per node
        ({"SLURM_LOCALID": "8"}, "local task 8"),
        ({"SLURM_PROCID": "x"}, "SLURM_PROCID"),
    ],
)
def test_slurm_task_layout_mismatch(change, match):
    with pytest.raises(rz.RendezvousError, match=match):
        rz.from_slurm(TASK | change, 6002, 8, 8, True, "per_process")


def test_slurm_per_node_refuses_a_task_per_process():
    with pytest.raises(rz.RendezvousError, match="one srun task per node"):
        rz.from_slurm(TASK, 6002, 8, 8, True, "per_node")


def test_slurm_task_needs_a_shared_run_dir():
    """Each task's moekit would otherwise make a run directory of its own."""
    from conftest import compose

    cfg = compose("smoke", ["cluster=slurm", "cluster.processes_per_node=8", "cluster.gpus_per_node=8"])
    with pytest.raises(rz.RendezvousError, match="run.dir=PATH"):
        rz.processes(cfg, TASK)
    shared = compose(
        "smoke", ["cluster=slurm", "cluster.processes_per_node=8", "cluster.gpus_per_node=8", "run.dir=/r"]
    )
    assert [p[rz.PROCESS_ID] for p in rz.processes(shared, TASK)] == ["9"]


def test_launchers_share_a_run_dir(tmp_path):
    from moekit import rundir
    from moekit.rundir import attempts

    run = tmp_path / "run"
    assert rundir.for_launcher(run, 0) == run
    other = rundir.for_launcher(run, 8)
    assert other == run / "launchers" / "8"
    other.mkdir(parents=True)  # the other launcher may start first
    assert attempts.check_reusable(run, {}) is None  # still a new run for process 0's launcher
