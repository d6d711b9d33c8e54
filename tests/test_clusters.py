"""The cluster-kind table (config/clusters.py): the schema's choices, conf/cluster, the rendezvous per kind and the
render targets name the same kinds."""

import typing
from pathlib import Path

import yaml

from moekit.config.clusters import CLUSTER_KINDS
from moekit.config.schema import Cluster
from moekit.render.targets import TARGETS
from moekit.translate.rendezvous import FROM_CLUSTER

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
