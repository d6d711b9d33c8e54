"""Rendezvous for local, JobSet and Slurm environments (pure functions over a given env)."""

from __future__ import annotations

import pytest

from moekit import rendezvous as rz


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
