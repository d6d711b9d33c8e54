"""The cluster kind: one host for local, job names, volumes, run directories that outlive pods, secrets by reference,
the fabric a multi-node JobSet needs."""

from __future__ import annotations

import math
from collections.abc import Iterator

from moekit.base.redact import is_secret_name
from moekit.config import formats
from moekit.config.checks.problem import Problem
from moekit.config.kinds.clusters import CLUSTER_KINDS
from moekit.config.schema import Cluster, Config


def local_is_one_host(cfg: Config) -> Iterator[Problem]:
    """cluster=local runs on this host only, so it has one node."""
    if cfg.cluster.row.one_host and cfg.cluster.nodes != 1:
        yield Problem(
            "cluster.nodes",
            f"cluster=local runs on one host but cluster.nodes={cfg.cluster.nodes}",
            "cluster.nodes=1, or "
            + " / ".join(f"cluster={k}" for k, row in CLUSTER_KINDS.items() if not row.one_host)
            + " for a multi-node job (moekit render ... target=jobset)",
        )


def keys_of_another_kind(cfg: Config) -> Iterator[Problem]:
    """A cluster key that only another cluster kind reads (its row's `keys`), set away from its default, is ignored
    by this one: say so rather than drop it without a word."""
    c = cfg.cluster
    for kind, row in CLUSTER_KINDS.items():
        if kind == c.kind:
            continue
        for key in row.keys:
            if getattr(c, key) != Cluster.model_fields[key].get_default(call_default_factory=True):
                yield Problem(
                    f"cluster.{key}",
                    f"only cluster={kind} reads cluster.{key}; cluster={c.kind} ignores it",
                    f"drop cluster.{key}, or run under cluster={kind}",
                )


def job_names(cfg: Config) -> Iterator[Problem]:
    """One rule for the names a cluster job gets (JobSet, pods, Compose services, Slurm job)."""
    c = cfg.cluster
    if c.row.one_host:
        return
    name = formats.job_name(cfg)
    why = formats.JOB_NAME.problem(name)
    if why:
        source = "" if c.name else f" (from experiment_name={cfg.experiment_name})"
        yield Problem("cluster.name", f"job name {name!r}{source} {why}", f"cluster.name={formats.job_name_fix(name)}")


def volumes_valid(cfg: Config) -> Iterator[Problem]:
    """Volumes have unique DNS-label names and absolute paths, one source each on JobSet and none on Slurm;
    cluster.output names a writable one."""
    c = cfg.cluster
    names = [v.name for v in c.volumes]
    for i, v in enumerate(c.volumes):
        key = f"cluster.volumes[{i}]"
        if names.count(v.name) > 1 or v.name == "dshm":
            yield Problem(f"{key}.name", f"volume name '{v.name}' is taken (dshm is /dev/shm's)", "give it a new name")
        if why := formats.DNS_LABEL.problem(v.name):
            yield Problem(f"{key}.name", f"'{v.name}' {why}", f"{key}.name=data")
        if not v.path.startswith("/"):
            yield Problem(f"{key}.path", f"'{v.path}' is not an absolute path", f"{key}.path=/{v.path.lstrip('./')}")
        source = [k for k in ("claim", "host_path") if getattr(v, k)]
        if c.row.pods and len(source) != 1:
            yield Problem(
                f"{key}.{source[-1]}" if source else key,
                f"volume '{v.name}' needs exactly one source for the pods, got {source or 'none'}",
                f"{key}.claim=PVC_NAME (a PersistentVolumeClaim; ReadWriteMany for several pods) or "
                f"{key}.host_path=/NODE/PATH",
            )
        if c.row.shared_paths and source:
            yield Problem(
                f"{key}.{source[0]}",
                f"Slurm mounts nothing: {source[0]} applies to JobSet pods only",
                f"drop it and give {key}.path a file system path that every node of the allocation sees",
            )
    if c.output is not None:
        vol = c.output_volume
        if vol is None:
            yield Problem(
                "cluster.output",
                f"names volume '{c.output}', but cluster.volumes has {names or 'none'}",
                "cluster.volumes=[{name: runs, path: /workspace/outputs, claim: PVC_NAME}] cluster.output=runs",
            )
        elif vol.read_only:
            yield Problem("cluster.output", f"volume '{vol.name}' is read_only", f"drop read_only of '{vol.name}'")


def _persistent(cfg: Config) -> bool:
    """Whether the run directory outlives the job's pods (JobSet) or is one shared path (Slurm)."""
    where = cfg.run_dir
    if where is None:
        return False
    if cfg.cluster.row.shared_paths:
        return True
    return any(
        not v.read_only and (where == v.path or where.startswith(v.path.rstrip("/") + "/")) for v in cfg.cluster.volumes
    )


def checkpoints_persist(cfg: Config) -> Iterator[Problem]:
    """A cluster job's checkpoints must survive its pods and be one set for all nodes, or a restart starts over."""
    c = cfg.cluster
    if cfg.checkpoint.every == 0 or c.row.one_host or _persistent(cfg):
        return
    where, source = c.row.lost_where, c.row.volume_source
    yield Problem(
        "cluster.output",
        f"checkpoint.every={cfg.checkpoint.every} on cluster={c.kind}, but the run directory is in {where}: "
        "a restarted job would start again at step 0",
        f"cluster.volumes=[{{name: runs, path: /shared/runs, {source}}}] cluster.output=runs",
    )


def network_fits_the_layout(cfg: Config) -> Iterator[Problem]:
    """A JobSet over several nodes needs the pods' fabric: multi-node NVLink (NVL72) and RDMA between domains."""
    c, net = cfg.cluster, cfg.network
    domain = cfg.hardware.nvlink_domain
    if not c.row.pods or c.nodes == 1 or not domain:
        return
    per_slice = math.prod(cfg.ici_filled.values())
    multi_node_nvlink = domain > c.gpus_per_node and per_slice > c.gpus_per_node
    if multi_node_nvlink and not net.resource_claim_template:
        yield Problem(
            "network",
            f"the ICI axes span {per_slice // c.gpus_per_node} nodes of an NVL72 rack, but network={net.name} "
            "gives the pods no multi-node NVLink (an IMEX channel of an NVIDIA ComputeDomain)",
            "network=nvl72_ib (NVLink within each rack, InfiniBand between racks) or network=gb200_computedomain",
        )
    all_on_nvlink = multi_node_nvlink and cfg.num_slices == 1 and per_slice <= domain
    if not all_on_nvlink and not net.resources:
        yield Problem(
            "network",
            f"collectives cross nodes over the network, but network={net.name} requests no RDMA devices for the "
            "pods (NCCL would fall back to TCP sockets)",
            "network=ib (InfiniBand), network=efa (AWS), or network=nvl72_ib (GB200/GB300 racks)",
        )


def no_inline_secrets(cfg: Config) -> Iterator[Problem]:
    """A rendered manifest or batch script is a file people share: secrets go in by reference only."""
    if cfg.cluster.row.one_host:
        return  # a local run passes them to its processes and redacts them from everything it writes
    sections = {"cluster.env": cfg.cluster.env, "hardware.env": cfg.hardware.env, "network.env": cfg.network.env}
    sections |= {"memory.env": cfg.memory.env, "xla.env": cfg.xla.env, "maxtext.extra": cfg.maxtext.extra}
    for where, mapping in sections.items():
        for name, value in mapping.items():
            if isinstance(value, str) and value and is_secret_name(name, cfg.run.secrets):
                yield Problem(
                    f"{where}.{name}",
                    f"a secret value would be written in plain text into the cluster={cfg.cluster.kind} job",
                    f"remove it and reference a Kubernetes Secret: cluster.secrets=[{{env: {name.upper()}, "
                    "secret: SECRET_NAME, key: KEY}] (Slurm: export it in the submitting shell)",
                )
