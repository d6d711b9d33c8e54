"""The run's own sections: where it is kept, the training loop, checkpoints, raw MaxText keys, expectations,
profiling and data."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from moekit.config.sections.base import Scalar, Section


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
    routing_every: int = Field(5, ge=0)
    """Steps between samples of the routing load (tokens per expert of each MoE layer, from step 0: routing.jsonl,
    summary.json's `routing`, the report's routing plot; observe/runs/routing.py); 0 records none."""


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
