"""Where a run runs: the device mesh, the cluster kind and its settings, the network and the fabric check."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from moekit.config.kinds.clusters import CLUSTER_KINDS, ClusterKind
from moekit.config.sections.base import Scalar, Section


class Axes(Section):
    """Sizes of the mesh axes (data, fsdp, tensor, expert) at one level, ICI or DCN."""

    data: int = 1
    """Pure data parallelism (replicated weights)."""
    fsdp: int = 1
    """Fully sharded data parallelism (weights sharded, gathered per layer)."""
    tensor: int = 1
    """Tensor parallelism."""
    expert: int = 1
    """Expert parallelism: routed experts sharded across this many devices."""

    @model_validator(mode="after")
    def _positive(self) -> Axes:
        for name, value in self.items():
            if value == 0 or value < -1:
                raise ValueError(f"{name}={value}: an axis is a positive size, or -1 to fill")
        return self

    def items(self) -> list[tuple[str, int]]:
        """(axis name, size) for each axis, always in the order data, fsdp, tensor, expert."""
        return [("data", self.data), ("fsdp", self.fsdp), ("tensor", self.tensor), ("expert", self.expert)]


class Parallelism(Section):
    """The device mesh: axes within a slice (ICI) and across slices (DCN)."""

    ici: Axes = Axes(fsdp=-1)
    """Axes inside a slice (NVLink domain / node); -1 in one axis fills the remaining devices."""
    dcn: Axes = Axes()
    """Axes across slices (over the data-center network); their product is the slice count."""


class Cluster(Section):
    """Where the job's processes run (local, JobSet or Slurm), how many, and the job's cluster settings.

    One flat set of keys, as users type them (cluster.partition, cluster.namespace): the keys only one kind reads
    are listed on that kind's row (config/kinds/clusters.py `keys`; docs/kubernetes.md, docs/slurm.md), and one set for
    another kind draws a warning. The rest (counts, ports, names, volumes, env, grace) every cluster job reads."""

    kind: Literal["local", "jobset", "slurm"]
    """Where processes run."""
    nodes: int = Field(ge=1)
    """Nodes (hosts) in the job."""
    gpus_per_node: int = Field(ge=1)
    """Devices per node. On CPU: host devices per node, split evenly over its processes."""
    processes_per_node: int = Field(ge=1)
    """JAX processes per node: 1 (one drives all devices) or gpus_per_node (one per device)."""
    coordinator_port: int | None = Field(None, ge=1, le=65535, examples=[29500])
    """TCP port of the jax.distributed coordinator (process 0). None: a local multi-process run takes a free port
    of its own at each launch, so concurrent runs on one host never meet; a port set here is used as given (and
    refused before launch when taken). cluster=jobset and cluster=slurm set one: every host must know it."""
    rendezvous_timeout_s: int = Field(300, ge=1)
    """Seconds a process waits for all others to join before it fails (jax.distributed initialization; also MaxText's
    jax_distributed_initialization_timeout). Size it to the longest a cluster takes to start the last process:
    cluster=jobset sets 1800 (a pending pod, an image pull), cluster=slurm 600."""
    name: str | None = None
    """JobSet / Slurm job name; None = experiment_name with '_' as '-'."""
    image: str = "moekit:latest"
    """Container image of every pod (built from this repository's Dockerfile)."""
    namespace: str = "default"
    """Kubernetes namespace of the JobSet."""
    queue: str | None = None
    """Kueue LocalQueue; set, the JobSet is created suspended and Kueue admits it."""
    max_restarts: int = Field(3, ge=0)
    """Whole-group restarts after a failure (JobSet failurePolicy.maxRestarts); node disruptions do not count."""
    tolerations: list[Toleration] = []
    """Pod tolerations (for example of the GPU nodes' taint)."""
    node_selector: dict[str, str] = {}
    """Pod node selector (node label -> value)."""
    service_account: str | None = None
    """Kubernetes service account of the pods; None = the namespace default."""
    secrets: list[SecretEnv] = []
    """Environment variables read from Kubernetes Secrets (never inlined into a manifest)."""
    env: dict[str, str] = {}
    """Extra pod environment, after moekit's own; $(VAR) may refer to a variable defined earlier."""
    shm_gib: int = Field(64, ge=1)
    """Size limit of the memory-backed /dev/shm of each pod, GiB."""
    partition: str | None = None
    """Slurm partition (sbatch --partition); None = the cluster default."""
    account: str | None = None
    """Slurm account (sbatch --account); None = the user default."""
    time_limit: str = "02:00:00"
    """Slurm wall-clock limit (sbatch --time)."""
    volumes: list[Volume] = []
    """Storage every pod mounts (JobSet: a PersistentVolumeClaim or a node path) or every Slurm node sees at the
    same path: run directories (cluster.output), data sets, caches."""
    output: str | None = None
    """Name of the cluster.volumes entry that holds run directories, so that checkpoints, metrics and logs outlive
    the pods and a restarted job resumes; None = each pod's own filesystem (lost with the pod)."""

    @property
    def row(self) -> ClusterKind:
        """The cluster kind's row (config/kinds/clusters.py): its hosts, where its run directories live."""
        return CLUSTER_KINDS[self.kind]

    @property
    def output_volume(self) -> Volume | None:
        """The volume named by cluster.output (None when unset or when no volume has that name)."""
        return next((v for v in self.volumes if v.name == self.output), None)

    task_layout: Literal["per_process", "per_node"] = "per_process"
    """Slurm tasks: one per JAX process (srun starts processes_per_node tasks per node; Slurm binds and signals
    each) or one per node (moekit starts the node's processes itself)."""
    container: Literal["pyxis", "none"] = "pyxis"
    """Slurm tasks run in cluster.image through pyxis/enroot, or directly on the nodes (moekit installed there)."""
    container_mounts: list[str] = []
    """Extra pyxis bind mounts SRC:DST[:FLAGS] (absolute paths); the submit directory is always mounted at
    container_workdir, so run directories land beside the script."""
    container_workdir: str = "/workspace"
    """Working directory inside the container (the image's WORKDIR; relative run directories live here)."""
    requeue: bool = True
    """Slurm may requeue the job after a node failure or a preemption (sbatch --requeue)."""
    signal_grace_s: int = Field(300, ge=0, le=65535)
    """Seconds from SIGTERM to SIGKILL: Slurm sends SIGTERM this long before the time limit (sbatch
    --signal=B:TERM@...), a JobSet pod gets it as terminationGracePeriodSeconds, and moekit gives its workers
    this long to save a checkpoint at the next step and exit (run/preemption.py)."""

    @model_validator(mode="after")
    def _port_known_to_every_host(self) -> Cluster:
        if not self.row.one_host and self.coordinator_port is None:
            raise ValueError(
                f"cluster={self.kind} needs cluster.coordinator_port: every host must reach process 0 on one port "
                "known before the job starts (e.g. cluster.coordinator_port=6002)"
            )
        return self


class Toleration(Section):
    """One Kubernetes pod toleration."""

    key: str | None = None
    """Taint key; None with operator Exists tolerates every taint."""
    operator: Literal["Exists", "Equal"] = "Exists"
    """Exists ignores value; Equal matches it."""
    value: str | None = None
    """Taint value (operator Equal)."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect; None matches all effects."""


class Volume(Section):
    """Storage every pod mounts, or every Slurm node sees, at one path."""

    name: str
    """Volume name in the pod spec (a DNS-1123 label); cluster.output refers to it."""
    path: str
    """Absolute path where the job sees it: the container's mount path (JobSet), a shared file-system path (Slurm)."""
    claim: str | None = None
    """JobSet: PersistentVolumeClaim to mount (ReadWriteMany when several pods write to it)."""
    host_path: str | None = None
    """JobSet: a directory of the node to mount (a shared file system mounted on every node)."""
    read_only: bool = False
    """Mounted read-only (data sets)."""


class SecretEnv(Section):
    """An environment variable read from a key of a Kubernetes Secret."""

    env: str
    """Environment variable name in the container (e.g. HF_TOKEN)."""
    secret: str
    """Kubernetes Secret name."""
    key: str
    """Key inside the Secret."""


class Network(Section):
    """The interconnect profile: NCCL environment, and the devices and capabilities pods need (option network=)."""

    name: str
    """Interconnect profile (none, ib, efa, gb200_computedomain)."""
    env: dict[str, Scalar] = {}
    """Environment the profile needs (NCCL transport settings)."""
    resources: dict[str, int] = {}
    """Extended resources each pod requests (RDMA devices, EFA interfaces), name -> count."""
    capabilities: list[str] = []
    """Linux capabilities the container adds (IPC_LOCK to pin RDMA memory); never privileged."""
    host_network: bool = False
    """Pods use the node's network namespace (EFA); DNS policy then becomes ClusterFirstWithHostNet."""
    resource_claim_template: str | None = None
    """DRA ResourceClaimTemplate each pod claims (an NVIDIA ComputeDomain channel for multi-node NVLink)."""
    min_kubernetes: str = "1.30"
    """Oldest Kubernetes API whose pod schema fits what this profile renders (the validation target)."""


class Fabric(Section):
    """The fabric check: after the rendezvous and before MaxText builds the model, the job's own processes run
    the collectives training uses on the configured mesh (all-reduce over all devices, the all-to-all of each
    expert-parallel group, the all-gather of each FSDP group), check every result and time them per link class
    against the rates `moekit plan` assumes (data/links.yaml); fabric.json in the run directory (docs/fabric.md)."""

    mode: Literal["off", "report", "enforce"] = "report"
    """off: no check; report: record, print and warn, then train; enforce: a wrong result or a slow link stops the
    run before training (a rank that does not arrive stops it in every mode: the others could only hang)."""
    min_fraction: float = Field(0.5, gt=0, le=1)
    """A group whose bus bandwidth at the largest size is under this fraction of its link class's expected rate
    is a slow link (judged where links.yaml has rates for the hardware; CPU has none)."""
    sizes: list[int] = Field([1048576, 268435456], min_length=1)
    """Buffer sizes per device, bytes (nccl-tests' size: the all-reduce buffer, the all-gather's output); the
    largest is the one judged against the link rate, smaller ones show latency."""
    iterations: int = Field(3, ge=1)
    """Timed runs per collective and size after the checked first one (the median is kept)."""
    timeout_s: float = Field(120, gt=0)
    """Seconds every rank has to arrive at each collective, and each collective to finish."""
    only: bool = False
    """Run the check and stop: no training (`moekit fabric`, or a rendered job with fabric.only=true, to test
    nodes before a run)."""

    @model_validator(mode="after")
    def _sizes(self) -> Fabric:
        for size in self.sizes:
            if size < 4 or size > 1 << 34:
                raise ValueError(f"fabric.sizes: {size} bytes is outside 4 B .. 16 GiB")
        return self
