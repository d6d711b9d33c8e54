"""The cluster kinds (cluster=<kind>): one row each, read by the checks, the typed config and the render targets.

A row says how many hosts the kind has, where its run directories live and what its job file carries. Each kind's
own code sits in the room that owns the concern: how its processes learn their ranks (translate/rendezvous.py,
FROM_CLUSTER) and the file that starts its job (render/targets.py, TARGETS); tests/test_clusters.py ties all to
the rows. Adding a kind: its conf/cluster/<kind>.yaml, its row here, its rendezvous and, if it has one, its target.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterKind:
    """One cluster kind: its hosts, where its run directories live, what its job file carries."""

    name: str
    """The option name (cluster=<kind>, conf/cluster/<kind>.yaml)."""
    one_host: bool = False
    """`moekit train` starts every process on this host: one node, a multi-process run takes a free coordinator
    port at each launch, and no job file is written (no job name; secrets stay in the processes' environment)."""
    pods: bool = False
    """Processes run in Kubernetes pods: each volume has one source (a claim or a node path), a run directory
    outlives the pods only on such a volume, and the pods' network carries the collectives."""
    shared_paths: bool = False
    """Every node sees the same paths (a shared file system): a run directory is one for all nodes wherever it
    lies, and volumes mount nothing."""
    lost_where: str = ""
    """Where a cluster job's run directory is without cluster.output (a restart cannot resume from there)."""
    volume_source: str = ""
    """What a volume for run directories gives besides its path (the fix of checks/cluster.py)."""


CLUSTER_KINDS: dict[str, ClusterKind] = {
    k.name: k
    for k in (
        ClusterKind(name="local", one_host=True),
        ClusterKind(
            name="jobset",
            pods=True,
            lost_where="each pod's own filesystem, lost with the pod",
            volume_source="claim: PVC_NAME",
        ),
        ClusterKind(
            name="slurm",
            shared_paths=True,
            lost_where="a new folder on every node",
            volume_source="no claim: a path every node sees",
        ),
    )
}
