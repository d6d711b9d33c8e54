"""The cluster-kind table (config/kinds/clusters.py): the schema's choices, conf/cluster, the rendezvous per kind, the
render targets, the host probes and the docs name the same kinds, and no module tells kinds apart by name."""

import typing
from pathlib import Path

import pytest
import yaml

from conftest import compose
from moekit.config.checks import warnings
from moekit.config.kinds.clusters import CLUSTER_KINDS
from moekit.config.schema import Cluster
from moekit.preflight import host as preflight
from moekit.render.targets import TARGETS
from moekit.translate import rendezvous as rz
from moekit.translate.rendezvous import FROM_CLUSTER
from name_compares import compared

REPO = Path(__file__).resolve().parents[1]


def test_the_schema_choices_are_the_rows():
    assert typing.get_args(Cluster.model_fields["kind"].annotation) == tuple(CLUSTER_KINDS)


def test_every_conf_option_is_a_row():
    files = {p.stem: yaml.safe_load(p.read_text())["kind"] for p in (REPO / "conf" / "cluster").glob("*.yaml")}
    assert files == {name: name for name in CLUSTER_KINDS}


def test_every_kind_has_a_rendezvous_and_every_job_file_a_target():
    assert set(FROM_CLUSTER) == set(CLUSTER_KINDS)
    assert {t.cluster for t in TARGETS.values()} == {k for k, row in CLUSTER_KINDS.items() if not row.one_host}


def test_rows_are_consistent():
    for row in CLUSTER_KINDS.values():
        assert sum((row.one_host, row.pods, row.shared_paths)) == 1, row.name  # one answer to "where do files live"
        assert bool(row.lost_where) == bool(row.volume_source) == (not row.one_host), row.name
        assert bool(row.job_env) == bool(row.runs_in) == bool(row.doc) == (not row.one_host), row.name
        assert bool(row.run_dir_rule) == row.shared_paths, row.name


def test_each_key_belongs_to_one_kind_and_its_page_documents_it():
    owners = [k for row in CLUSTER_KINDS.values() for k in row.keys]
    assert len(owners) == len(set(owners)) and set(owners) <= set(Cluster.model_fields)
    for row in CLUSTER_KINDS.values():
        if row.doc:
            page = (REPO / row.doc).read_text()
            assert f"cluster={row.name}" in page, row.doc
            assert [k for k in row.keys if f"cluster.{k}" not in page] == [], row.doc


def test_the_jobset_rendezvous_reads_the_rows_job_variable():
    assert rz.JOBSET_COORDINATOR_HOST == CLUSTER_KINDS["jobset"].job_env


@pytest.mark.parametrize("kind", [k for k, row in CLUSTER_KINDS.items() if not row.one_host])
def test_a_cluster_job_runs_only_where_its_variable_is_set(kind):
    """A cluster job's host probes are fatal only inside the job (the row's job_env), never taken for local."""
    cfg = compose("smoke", [f"cluster={kind}"])
    row = CLUSTER_KINDS[kind]
    outside, why = preflight.is_target(cfg, preflight.Host({}))
    assert not outside and row.runs_in in why
    inside, _ = preflight.is_target(cfg, preflight.Host({row.job_env: "x"}))
    assert inside


def test_a_key_of_another_kind_is_a_warning():
    found = warnings(compose("smoke", ["cluster=jobset", "cluster.partition=gpu"]))
    assert [p.key for p in found if "only cluster=slurm" in p.what] == ["cluster.partition"]
    assert not [p for p in warnings(compose("smoke", ["cluster=slurm", "cluster.partition=gpu"])) if "only" in p.what]


def test_no_module_tells_cluster_kinds_apart_by_name():
    assert compared(CLUSTER_KINDS, ["config/kinds/clusters.py"]) == []
