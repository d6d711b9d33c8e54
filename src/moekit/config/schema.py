"""The typed schema of a composed moekit config.

Hydra composes YAML from conf/; these models type every field (unknown keys and wrong types are
errors that list the valid choices) and carry one docstring per field with its unit and scope.
Derived values (device counts, filled mesh axes, slice count) are properties, computed here and
never typed by hand.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from moekit.base import quantities
from moekit.config.kinds.backends import BACKENDS, Backend
from moekit.config.kinds.clusters import CLUSTER_KINDS, ClusterKind
from moekit.config.kinds.families import FAMILIES
from moekit.config.kinds.hardware import link_classes

Scalar = str | int | float | bool | None


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class Run(Section):
    """Where a run is kept and how it is watched: name, directory, redacted secrets, hang watchdog."""

    name: str | None = None
    """MaxText run_name; None means the experiment name."""
    dir: str | None = None
    """Run directory; None means <base_dir>/<experiment_name>/<timestamp>. An existing one is resumed."""
    base_dir: str = "outputs"
    """Parent folder of generated run directories."""
    secrets: list[str] = []
    """Further names (environment variables, config or MaxText keys) whose values are redacted from everything
    moekit prints and writes; credential-looking names (HF_TOKEN, *_API_KEY, *PASSWORD*) always are."""
    stall_timeout_s: float | None = Field(None, ge=0)
    """Hang watchdog: seconds without a finished step (counted from the first) after which moekit writes every
    worker's Python stacks to the run directory and stops the run as `hang`. None derives it from the step times
    seen so far (run/watchdog.py); 0 turns the watchdog off."""


class Train(Section):
    """The training loop: steps, batch, sequence length, seed and learning-rate schedule."""

    steps: int = Field(10, ge=1)
    """Optimizer steps to run."""
    per_device_batch_size: int | float = Field(2, gt=0)
    """Sequences per device per step (MaxText allows fractions below 1)."""
    seq_len: int = Field(128, ge=8)
    """Tokens per sequence (MaxText max_target_length)."""
    seed: int = 0
    """Seed of weight init and data order."""
    learning_rate: float = Field(3.0e-5, gt=0)
    """Peak learning rate."""
    warmup_steps_fraction: float = Field(0.1, ge=0, le=1)
    """Fraction of steps spent in linear warm-up."""


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


class Checkpoint(Section):
    """How often Orbax checkpoints are saved."""

    every: int = Field(0, ge=0)
    """Steps between Orbax checkpoints; 0 disables checkpointing."""
    init_from: str | None = None
    """Start from these parameters: a folder `moekit checkpoint import` wrote (MaxText load_parameters_path=
    <folder>/0/items); None = random initialization."""


class MaxText(Section):
    """Raw MaxText keys, passed through as written."""

    extra: dict[str, Scalar] = {}
    """Raw MaxText keys passed through last (escape hatch; MaxText's validator still checks them)."""


class Provenance(Section):
    """Where an expected number comes from: a publication or a measurement."""

    kind: Literal["published", "measured"]
    """Where a number comes from."""
    source: str
    """Published: the citation. Measured: hardware, image or versions, date, run directory."""
    gpus: int | None = None
    """GPU count the number was obtained on."""
    date: str | None = None
    """Date of the publication or measurement (YYYY-MM-DD)."""


class Expect(Section):
    """The performance an experiment is expected to reach, each number with its provenance."""

    tflops_per_gpu: float | None = None
    """Expected model TFLOP/s per GPU."""
    baseline_tflops_per_gpu: float | None = None
    """Expected TFLOP/s per GPU of the unoptimized baseline, when the source gives one."""
    scaling_efficiency: float | None = None
    """Expected weak-scaling efficiency (0..1)."""
    step_time_s: float | None = None
    """Expected seconds per step."""
    provenance: Provenance
    """Required: every expected number says where it comes from."""


# The families' decoder blocks, one per row of config/kinds/families.py (pydantic's refusal of another lists them).
DecoderBlock = Literal[tuple(FAMILIES)]  # type: ignore[valid-type]


class Routing(Section):
    """How a token picks its experts, in MaxText's own keys: each one is passed to MaxText as written.

    Every field is required: a model option states its family's routing, so moekit's checks see what MaxText
    will run (a default here would silently replace the MaxText model file's value).
    """

    routed_score_func: Literal["", "softmax", "sigmoid"]
    """Router score: "" = top-k of the logits, then softmax over the k (Mixtral, Qwen3, gpt-oss, Llama 4 applies a
    sigmoid to the top-1 instead); "softmax" = softmax over all experts, then top-k, no renormalization
    (DeepSeek-V2); "sigmoid" = per-expert sigmoid, top-k, renormalized (DeepSeek-V3)."""
    norm_topk_prob: bool
    """Renormalize the top-k weights to sum to 1 (Qwen3). The TE MoE block refuses it."""
    routed_scaling_factor: float
    """Multiplier of the routed experts' weights (DeepSeek decoder only; DeepSeek-V3: 2.5)."""
    routed_bias: bool
    """A learnable per-expert bias on the router logits (DeepSeek-V3's selection bias, gpt-oss's router bias)."""
    routed_bias_update_rate: float = Field(ge=0)
    """Auxiliary-loss-free balancing: per-step update of the selection bias (DeepSeek decoder only; 0 = off)."""
    shared_experts: int = Field(ge=0)
    """Always-active experts beside the routed ones (read by the DeepSeek and Llama 4 decoders only)."""
    n_routing_groups: int
    """Group-limited routing: experts split into this many groups; -1 = off (DeepSeek-V3-style routing only)."""
    topk_routing_group: int
    """Group-limited routing: a token's experts come from its top this-many groups; -1 = off."""
    interleave_moe_layer_step: int = Field(ge=1)
    """Every n-th layer is an MoE layer, the others dense (read by the Llama 4 decoder only; Maverick: 2)."""
    load_balance_loss_weight: float = Field(ge=0)
    """Weight of the auxiliary load-balancing loss (0 = none)."""


class Model(Section):
    """The model: MaxText model file, decoder family, layer and expert counts, routing."""

    name: str
    """MaxText model_name (a file in MaxText's configs/models/)."""
    decoder_block: DecoderBlock
    """MaxText decoder_block: the family's layer code (what moekit's family checks key on)."""
    num_layers: int = Field(ge=1)
    """Decoder layers (MaxText base_num_decoder_layers)."""
    first_dense_layers: int = Field(ge=0)
    """Leading layers with a dense MLP instead of MoE (MaxText first_num_dense_layers)."""
    num_experts: int = Field(ge=1)
    """Routed experts per MoE layer."""
    experts_per_token: int = Field(ge=1)
    """Routed experts each token goes to (top-k)."""
    routing: Routing
    """Router and expert-layout keys of the family (MaxText's names)."""
    extra: dict[str, Scalar] = {}
    """Further MaxText model keys (widths, vocab) overriding the model file."""
    attention: str | None = None
    """MaxText attention kernel (cudnn_flash_te needs TransformerEngine); None = MaxText's choice."""

    @model_validator(mode="after")
    def _check(self) -> Model:
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token={self.experts_per_token} exceeds num_experts={self.num_experts}")
        if self.first_dense_layers >= self.num_layers:
            raise ValueError(f"first_dense_layers={self.first_dense_layers} leaves no MoE layer of {self.num_layers}")
        return self


class Moe(Section):
    """How the routed experts are computed: back end, dispatch, capacity and receive buffers."""

    backend: Literal["te", "te_gmm", "tokamax", "ragged_dot", "dense", "capacity", "megablox"]
    """Routed-expert compute path; see docs/optimizations.md."""
    capacity_factor: float = -1.0
    """Expert capacity as a multiple of the balanced load; <= 0 means dropless."""
    allow_token_dropping: bool = False
    """Must be true to run a token-dropping (capacity_factor > 0) configuration."""
    force: bool = False
    """Run a back end even where it is known to be pathological (megablox on GPU)."""
    dispatch: Literal["ragged_all_to_all", "ring", "nccl_ep"] = "ragged_all_to_all"
    """Expert-parallel dispatch/combine: MaxText's ragged all-to-all, ring of experts, or NCCL EP (moe=te only)."""
    ragged_buffer_factor: float = -1.0
    """Receive buffer per EP rank as a multiple of the balanced load; <= 0 sizes it for the worst case."""
    overflow_check_every: int = Field(20, ge=1)
    """moe=te: steps between host checks of NCCL EP receive-buffer overflow (overflowing steps skip the update)."""
    expert_precision: Literal["auto", "bf16"] = "auto"
    """moe=te_gmm: the expert GEMMs' precision; auto follows precision= (fp8: FP8 current scaling per expert), bf16
    keeps them bf16 while precision=fp8 still quantizes the dense GEMMs."""


class Precision(Section):
    """The GEMM precision (option precision=)."""

    name: Literal["fp32", "bf16", "fp8", "mxfp8"]
    """GEMM precision set."""


class Memory(Section):
    """Remat and offload of activations (option memory=)."""

    name: str = "custom"
    """Option name (conf/memory/<name>.yaml); shown as the origin of what it sets."""
    remat_policy: str
    """MaxText remat_policy (full, minimal, save_dot_except_mlp, custom, ...)."""
    tensors: dict[str, Literal["device", "remat", "offload"]] = {}
    """Per-tensor choices for remat_policy=custom (MaxText keys such as moe_mlpwi_0)."""
    env: dict[str, Scalar] = {}
    """Runtime environment the policy needs (pinned-host pool for offloaded activations)."""


class Xla(Section):
    """XLA flags and JAX compiler settings (option xla=)."""

    name: str = "custom"
    """Option name (conf/xla/<name>.yaml); shown as the origin of each flag."""
    flags: dict[str, Scalar] = {}
    """XLA flag name (without --) to value."""
    env: dict[str, Scalar] = {}
    """JAX compiler settings read from the environment (JAX_ENABLE_PGLE)."""


class Peaks(Section):
    """Datasheet dense peaks per device, the denominators of MFU."""

    bf16: quantities.Field("peak_tflops") | None
    """Dense BF16 peak, TFLOP/s per device; None where no meaningful peak exists (CPU)."""
    fp8: quantities.Field("peak_tflops") | None
    """Dense FP8 peak, TFLOP/s per device; None where no meaningful peak exists (CPU)."""


class Features(Section):
    """The low-precision formats the tensor cores run."""

    fp8: bool
    """FP8 tensor cores (Hopper and newer)."""
    mxfp8: bool
    """Block-scaled MXFP8 tensor cores (Blackwell only)."""


class HardwareLinks(Section):
    """A GPU's link classes, each a name in src/moekit/data/links.yaml `links:` (its rate and source live there)."""

    scale_up: str
    """Inside the NVLink domain (the NVLink generation, e.g. nvlink5)."""
    scale_out: str
    """Across NVLink domains: the network port per GPU (e.g. cx8_800g)."""
    host: str
    """GPU to host memory: the offload path (e.g. pcie5_x16, nvlink_c2c)."""

    @model_validator(mode="after")
    def _known(self) -> HardwareLinks:
        known = link_classes()
        for role, name in (("scale_up", self.scale_up), ("scale_out", self.scale_out), ("host", self.host)):
            if name not in known:
                raise ValueError(
                    f"links.{role}={name!r} is not a link class of src/moekit/data/links.yaml (it has: "
                    f"{', '.join(known)}); name one of them, or add its row there (gb_per_s, source)"
                )
        return self


# What a GPU generation's row (conf/hardware/<option>.yaml) must state: every fact plan, MFU and the fabric check read.
GPU_FACTS = ("sm", "hbm_gib", "hbm_tb_per_s", "hbm_source", "nvlink_domain", "links", "host_gib_per_gpu", "host_source")


class Hardware(Section):
    """The accelerator: one row per generation (option hardware=, conf/hardware/<option>.yaml) holding its platform,
    architecture, HBM size and bandwidth, NVLink domain, link classes, host memory, peaks, features and env."""

    name: str
    """Hardware option name (cpu, h100, h200, b200, gb200, gb300)."""
    platform: Literal["cpu", "gpu"]
    """JAX platform."""
    arch: str
    """Architecture family (cpu, hopper, blackwell)."""
    sm: quantities.Field("sm") | None = None
    """CUDA compute capability as an integer (90 = 9.0); None on CPU."""
    hbm_gib: quantities.Field("hbm_gib") | None = None
    """Device memory per GPU, GiB; None on CPU."""
    hbm_tb_per_s: quantities.Field("hbm_tb_per_s") | None = None
    """HBM bandwidth per GPU, TB/s (datasheet): the forecast's memory-bound parts; None on CPU."""
    hbm_source: str | None = None
    """Citation of the HBM bandwidth."""
    nvlink_domain: quantities.Field("nvlink_domain") | None = None
    """GPUs that share one NVLink domain (8: an HGX/DGX node; 72: a GB200/GB300 NVL72 rack); None on CPU.
    The ICI axes (parallelism.ici) should fit in one; what crosses domains runs over the slower network."""
    links: HardwareLinks | None = None
    """The link classes inside and across NVLink domains and to the host; None on CPU."""
    host_gib_per_gpu: quantities.Field("host_gib_per_gpu") | None = None
    """Host memory per GPU, GiB: the limit of offloaded activations; None on CPU."""
    host_source: str | None = None
    """Citation of the host memory size."""
    peak_tflops: Peaks
    """Datasheet peaks used for MFU."""
    peak_source: str
    """Citation of the peak numbers."""
    features: Features
    """What the tensor cores support."""
    low_precision: Literal["mxfp8", "fp8", "bf16"]
    """The lowest GEMM precision the tensor cores run natively: what precision=low resolves to (mxfp8 on Blackwell,
    fp8 on Hopper)."""
    env: dict[str, Scalar] = {}
    """Runtime environment specific to this hardware."""

    @model_validator(mode="after")
    def _complete(self) -> Hardware:
        if self.platform != "gpu":
            return self
        missing = [k for k in GPU_FACTS if getattr(self, k) is None]
        missing += ["peak_tflops.bf16"] if self.peak_tflops.bf16 is None else []
        missing += ["peak_tflops.fp8"] if self.features.fp8 and self.peak_tflops.fp8 is None else []
        if missing:
            raise ValueError(
                f"hardware={self.name} lacks {', '.join(missing)}: a GPU generation's row "
                f"(conf/hardware/{self.name}.yaml) states every one (docs/extending.md, 'A hardware generation')"
            )
        return self


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
    """Seconds a process waits for all others to join before it fails (jax.distributed initialization)."""
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


class Profile(Section):
    """Profiling: whether MaxText's profiler traces training, and which steps."""

    enabled: bool
    """Trace training with MaxText's xplane profiler and write a step-time breakdown (profile.json)."""
    skip_steps: int = Field(3, ge=1)
    """Steps before the traced window (step 0 compiles); MaxText skip_first_n_steps_for_profiler."""
    steps: int = Field(3, ge=1)
    """Consecutive steps traced; MaxText profiler_steps."""


class Data(Section):
    """The input pipeline: synthetic tokens or files, format, tokenizer, packing and shuffling (option data=)."""

    dataset_type: Literal["synthetic", "tfds", "hf", "grain"]
    """MaxText dataset_type: synthetic tokens, Hugging Face datasets on files (hf), or Grain (grain)."""
    format: Literal["parquet", "json", "arrow", "arrayrecord"] | None = None
    """File format: hf reads parquet, json or arrow; grain reads arrayrecord (tf.train.Example records) or parquet."""
    files: str | None = None
    """Training files: a path or glob on this machine or a mounted volume (gs:// and hf:// are read remotely);
    grain also takes a weighted mixture 'a*.arrayrecord,0.7;b*.arrayrecord,0.3'."""
    column: str = "text"
    """The column holding the text (MaxText train_data_columns)."""
    tokenizer: str | None = None
    """A tokenizer MaxText ships (a name in its assets/tokenizers: tokenizer.llama2, tokenizer.mistral-v3,
    tokenizer_llama3.tiktoken, qwen3-tokenizer, ...), a local path, or a Hugging Face id."""
    tokenizer_type: Literal["sentencepiece", "tiktoken", "huggingface"] = "sentencepiece"
    """How MaxText loads the tokenizer (grain); the hf pipeline loads every tokenizer with AutoTokenizer."""
    packing: bool = True
    """Pack several documents into each sequence (MaxText packing)."""
    max_segments_per_seq: int = -1
    """Documents packed into one sequence at most; TE's cuDNN attention on one process per node needs it > 0."""
    workers: int = Field(1, ge=0)
    """Grain worker processes per training process (grain_worker_count; the hf pipeline allows 0 or 1)."""
    shuffle: bool = True
    """Shuffle the records (enable_data_shuffling; seeded by train.seed)."""
    corpus: Literal["stdlib"] | None = None
    """A corpus moekit prepares on the training host with no download, then trains on (data.files is set to its
    shards): stdlib, the running Python's standard library sources (data=stdlib; docs/adapting.md)."""
    epochs: int = Field(1, ge=1)
    """Passes over the data at most (MaxText num_epoch; grain only: the hf pipeline reads its files once)."""


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


class Config(Section):
    """A composed, typed moekit configuration."""

    experiment_name: str = "default"
    """Names run directories and cluster jobs; each experiment file sets its own."""
    run: Run = Run()
    train: Train = Train()
    parallelism: Parallelism = Parallelism()
    checkpoint: Checkpoint = Checkpoint()
    maxtext: MaxText = MaxText()
    expect: Expect | None = None
    fabric: Fabric = Fabric()
    model: Model
    moe: Moe
    precision: Precision
    memory: Memory
    xla: Xla
    hardware: Hardware
    cluster: Cluster
    network: Network
    data: Data
    profile: Profile

    # ---- derived values (never typed by hand) ----
    @property
    def num_processes(self) -> int:
        """JAX processes in the job: nodes x processes per node."""
        return self.cluster.nodes * self.cluster.processes_per_node

    @property
    def devices_per_process(self) -> int:
        """Devices each process drives: the node's devices split over its processes, at least 1."""
        return max(1, self.cluster.gpus_per_node // self.cluster.processes_per_node)

    @property
    def num_devices(self) -> int:
        """Devices in the job: processes x devices per process."""
        return self.num_processes * self.devices_per_process

    @property
    def num_slices(self) -> int:
        """Slices of the mesh: the product of the DCN axes."""
        return math.prod(v for _, v in self.parallelism.dcn.items())

    @property
    def ici_filled(self) -> dict[str, int]:
        """ICI axes with a -1 replaced by what fills one slice (unchanged if it does not divide)."""
        axes = dict(self.parallelism.ici.items())
        per_slice = self.num_devices // max(1, self.num_slices)
        known = math.prod(v for v in axes.values() if v != -1)
        for name, value in axes.items():
            if value == -1:
                axes[name] = per_slice // known if known and per_slice % known == 0 else -1
        return axes

    @property
    def global_batch(self) -> float:
        """Sequences per step across all devices."""
        return self.train.per_device_batch_size * self.num_devices

    @property
    def backend(self) -> Backend:
        """The MoE back end's row (config/kinds/backends.py): what moe=<backend> runs and needs."""
        return BACKENDS[self.moe.backend]

    @property
    def expert_parallel_size(self) -> int:
        """Ranks the experts are spread over: the ICI expert axis (filled) times the DCN one."""
        return self.ici_filled["expert"] * self.parallelism.dcn.expert

    @property
    def ring_of_experts(self) -> bool:
        """moe.dispatch=ring, or the raw MaxText key (maxtext.extra wins over the translated value)."""
        return bool(self.maxtext.extra.get("use_ring_of_experts", self.moe.dispatch == "ring"))

    @property
    def run_dir(self) -> str | None:
        """The run directory the config names: run.dir, else, for a cluster job with cluster.output, the same folder
        on that volume for every node and every restart (<path>/<cluster.name or experiment_name>), so that a
        restarted job resumes it. None: a new <run.base_dir>/<experiment>/<timestamp> per run."""
        if self.run.dir:
            return self.run.dir
        volume = self.cluster.output_volume
        if volume is None or self.cluster.row.one_host:
            return None
        return f"{volume.path.rstrip('/')}/{self.cluster.name or self.experiment_name}"

    @property
    def attention_kernel(self) -> str | None:
        """The attention kernel MaxText runs: maxtext.extra.attention over model.attention; None = MaxText's choice."""
        return str(self.maxtext.extra.get("attention", self.model.attention) or "") or None

    @property
    def maxtext_hardware(self) -> str:
        """MaxText's hardware key: cpu, gpu (one process per node) or gpu_multiprocess (one per GPU)."""
        if self.hardware.platform == "cpu":
            return "cpu"
        if self.cluster.processes_per_node > 1 or self.backend.te_block:
            return "gpu_multiprocess"
        return "gpu"

    @property
    def run_name(self) -> str:
        """MaxText's run_name: run.name, else the experiment name."""
        return self.run.name or self.experiment_name

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-compatible nested mappings (what run directories record and views show)."""
        return self.model_dump(mode="json")


def defaults(model: type[Section] = Config) -> dict[str, Any]:
    """Every default of the schema as one nested mapping: the only place defaults are written. Hydra composes it
    first (config.yaml's `base_config`), so every key can be set with a.b=value; group options and experiments
    then write only what they choose. Required fields have no entry; a required section gets its defaults."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            section = field.annotation
            if isinstance(section, type) and issubclass(section, Section) and (inner := defaults(section)):
                out[name] = inner
            continue
        value = field.get_default(call_default_factory=True)
        out[name] = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return out
