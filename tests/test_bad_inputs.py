"""What a user can get wrong, through the real command line: each case exits 2 without a traceback, names the
field and the fix, launches nothing and changes no file (every file under the test's folder is compared before
and after). Every fix a message spells out as an override is then applied and must itself be accepted."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, compose, moekit
from moekit import cli
from moekit.base import redact
from moekit.base.errors import MoekitError
from moekit.commands import render as render_cmd
from moekit.config.checks import problems
from moekit.preflight import host as preflight

S = ["train", "experiment=smoke"]
R = ["render", "experiment=smoke"]

# id, command line ({tmp}: the test's folder, {port}: a port in use), the field it names, words naming the
# problem, words of the fix. Every case exits 2: moekit's errors and argparse's alike.
CASES = [
    # malformed or unknown overrides
    ("override-without-value", [*S, "train.steps"], "train.steps", "is not key=value", "train.steps=20"),
    ("override-without-key", [*S, "=3"], "'=3'", "is not key=value", "write it as KEY=VALUE"),
    ("override-bad-syntax", [*S, "train.steps=[1,"], "train.steps", "could not compose", "write each override"),
    ("unknown-key", [*S, "train.stepz=3"], "train.stepz", "unknown config key", "did you mean train.steps?"),
    ("unknown-section", [*S, "foo.bar=1"], "foo.bar", "foo is not a section", "correct the spelling"),
    (
        "unknown-moe-option",
        [*S, "moe=fast"],
        "moe=",
        "valid options for moe=",
        "fix: moe=ragged_dot (what the config chooses",
    ),
    ("moe-option-typo", [*S, "moe=ragged-dot"], "moe=", "did you mean moe=ragged_dot?", "fix: moe=ragged_dot"),
    # a group's option given to a key or group it is not an option of: the group that holds it is the fix
    ("key-naming-an-option", [*S, "mode=dense"], "'mode'", "unknown config key", "did you mean moe=dense?"),
    ("option-of-another-group", [*S, "model=dense"], "model=", "dense is an option of the moe group", "fix: moe=dense"),
    ("unknown-experiment", ["train", "experiment=nope"], "experiment=", "valid options for", "fix: experiment="),
    ("unknown-hardware", [*S, "hardware=tpu"], "hardware=", "valid options for hardware=", "fix: hardware="),
    # wrong types and ranges
    ("steps-not-int", [*S, "train.steps=ten"], "train.steps", "valid integer", "e.g. train.steps=10"),
    (
        "batch-not-number",
        [*S, "train.per_device_batch_size=abc"],
        "train.per_device_batch_size",
        "valid integer",
        "e.g.",
    ),
    ("steps-zero", [*S, "train.steps=0"], "train.steps", "greater than or equal to 1", "give train.steps a value"),
    ("seq-too-short", [*S, "train.seq_len=4"], "train.seq_len", "greater than or equal to 8", "train.seq_len=128"),
    ("precision-name", [*S, "precision.name=fp4"], "precision.name", "'fp32', 'bf16', 'fp8' or 'mxfp8'", "give"),
    ("port-range", [*S, "cluster.coordinator_port=70000"], "cluster.coordinator_port", "65535", "e.g."),
    ("no-experts", [*S, "model.num_experts=0"], "model.num_experts", "greater than or equal to 1", "give"),
    ("top-k-over-experts", [*S, "model.experts_per_token=16"], "model", "exceeds num_experts=8", "change the model"),
    ("checkpoint-negative", [*S, "checkpoint.every=-1"], "checkpoint.every", "greater than or equal to 0", "give"),
    # impossible meshes, experts vs EP, batch divisibility
    ("axis-zero", [*S, "parallelism.ici.expert=0"], "parallelism.ici", "an axis is a positive size", "change"),
    ("two-fill-axes", [*S, "parallelism.ici.data=-1"], "parallelism.ici", "more than one axis is -1", "at most one"),
    ("dcn-fill", [*S, "parallelism.dcn.data=-1"], "parallelism.dcn", "not supported across slices", "set every DCN"),
    (
        "mesh-product",
        [*S, "cluster.processes_per_node=2", "parallelism.ici.fsdp=3"],
        "parallelism.ici",
        "does not match 2 devices",
        "parallelism.ici.fsdp=-1",
    ),
    (
        "experts-vs-ep",
        [*S, "cluster.gpus_per_node=3", "parallelism.ici.fsdp=1", "parallelism.ici.expert=3"],
        "parallelism.ici.expert",
        "8 experts do not divide evenly over expert parallelism 3",
        "parallelism.ici.expert=1",
    ),
    ("batch-fraction", [*S, "train.per_device_batch_size=0.3"], "train.per_device_batch_size", "not a whole", "batch"),
    (
        "batch-over-dp",
        [*S, "cluster.processes_per_node=2", "train.per_device_batch_size=0.5", "parallelism.ici.fsdp=2"],
        "train.per_device_batch_size",
        "does not divide over 2 data-parallel ranks",
        "multiple of 2",
    ),
    (
        "processes-per-gpu",
        [*S, "hardware=h200", "moe=tokamax", "cluster.gpus_per_node=8", "cluster.processes_per_node=4"],
        "cluster.processes_per_node",
        "one process per node or one per GPU",
        "cluster.processes_per_node=8",
    ),
    ("local-multinode", [*S, "cluster.nodes=2"], "cluster.nodes", "runs on one host", "cluster.nodes=1"),
    ("local-multinode-dry-run", [*S, "cluster.nodes=2", "--dry-run"], "cluster.nodes", "one host", "cluster=jobset"),
    (
        "coordinator-port-taken",
        [*S, "cluster.processes_per_node=2", "cluster.coordinator_port={port}"],
        "cluster.coordinator_port",
        "is in use on this host",
        "(a free port)",
    ),
    (
        "coordinator-port-taken-dry-run",
        [*S, "--dry-run", "cluster.processes_per_node=2", "cluster.coordinator_port={port}"],
        "cluster.coordinator_port",
        "is in use on this host",
        "(a free port)",
    ),
    (
        "jobset-outside-pod",
        [*S, "cluster=jobset", "cluster.gpus_per_node=1"],
        "cluster=jobset",
        "MOEKIT_COORDINATOR_HOST",
        "render",
    ),
    # hardware features, token dropping
    ("mxfp8-on-hopper", [*S, "hardware=h200", "precision=mxfp8", "moe=tokamax"], "precision", "Blackwell", "fp8"),
    ("fp8-on-cpu", [*S, "precision=fp8"], "precision", "FP8 tensor cores", "precision=bf16"),
    ("gpu-config-without-gpu", [*S, "hardware=h200", "moe=tokamax"], "hardware=h200", "needs NVIDIA GPUs", "cpu"),
    ("megablox-on-gpu", [*S, "hardware=h200", "moe=megablox"], "moe", "interpret mode", "moe=tokamax"),
    ("capacity-drops", [*S, "moe=capacity"], "moe.capacity_factor", "drops tokens", "moe.allow_token_dropping=true"),
    (
        "capacity-factor",
        [*S, "moe.capacity_factor=1.25"],
        "moe.capacity_factor",
        "not dropless",
        "moe.capacity_factor=-1",
    ),
    # names that become Kubernetes or Slurm identifiers (one rule), namespaces, inline secrets
    ("jobset-name-case", [*R, "target=jobset", "cluster.name=Bad_Name"], "cluster.name", "DNS-1035", "=bad-name"),
    (
        "jobset-name-length",
        [*R, "target=jobset", "cluster.name=" + "a" * 30],
        "cluster.name",
        "at most 25 characters",
        "cluster.name=" + "a" * 25,
    ),
    (
        "slurm-derived-name",
        [*R, "target=slurm", "experiment_name=a_rather_long_experiment_name"],
        "cluster.name",
        "(from experiment_name=a_rather_long_experiment_name)",
        "cluster.name=a-rather-long-experiment",
    ),
    (
        "jobset-namespace",
        [*R, "target=jobset", "cluster.namespace=Team/ML"],
        "cluster.namespace",
        "not a DNS-1123 label",
        "cluster.namespace=default",
    ),
    ("render-no-target", ["render", "experiment=smoke"], "target=", "choose one target", "target=jobset"),
    (
        "jobset-inline-secret",
        [*R, "target=jobset", "cluster.env.HF_TOKEN=hf_abcdef123"],
        "cluster.env.HF_TOKEN",
        "secret value would be written in plain text",
        "cluster.secrets=[{env: HF_TOKEN",
    ),
    # values that could change the structure of a rendered file or a command line
    (
        "slurm-newline-in-name",
        [*R, "target=slurm", "cluster.name='x\n#SBATCH --wrap=id'"],
        "cluster.name",
        "U+000A LINE FEED",
        "write cluster.name without it",
    ),
    (
        "jobset-newline-in-env",
        [*R, "target=jobset", "cluster.env.NOTE='a\nkind: Secret'"],
        "cluster.env.NOTE",
        "U+000A LINE FEED",
        "without it",
    ),
    ("newline-in-run-dir", [*S, "run.dir='{tmp}/a\nb'"], "run.dir", "U+000A", "write run.dir without it"),
    ("line-separator", [*S, "hardware.env.FOO='a\u2028b'"], "hardware.env.FOO", "U+2028 LINE SEPARATOR", "without"),
    ("bidi-override", [*S, "run.name='\u202eevil'"], "run.name", "U+202E", "write run.name without it"),
    (
        "xla-flag-value-space",
        [*S, "xla.flags.xla_gpu_enable_latency_hiding_scheduler='true --xla_dump_to=/tmp/x'"],
        "xla.flags.xla_gpu_enable_latency_hiding_scheduler",
        "not one XLA_FLAGS word",
        "as one word",
    ),
    (
        "xla-flag-value-quote",
        [*S, "xla.flags.xla_dump_to='\"/tmp/x\"'"],
        "xla.flags.xla_dump_to",
        "no whitespace or quotes",
        "as one word",
    ),
    ("xla-flag-name", [*S, "xla.flags.XLA_GPU_X=1"], "xla.flags.XLA_GPU_X", "not an XLA flag name", "name it like"),
    (
        "xla-flags-through-env",
        [*S, "xla.env.XLA_FLAGS='--xla_dump_to=/tmp'"],
        "xla.env.XLA_FLAGS",
        "built by moekit",
        "xla.flags.NAME=VALUE",
    ),
    (
        "unknown-xla-flag",
        [*S, "xla.flags.xla_gpu_enable_latency_hiding_schedular=true"],
        "xla.flags.xla_gpu_enable_latency_hiding_schedular",
        "has no flag xla_gpu_enable_latency_hiding_schedular",
        "correct the spelling or remove",
    ),
    (
        "xla-flag-bad-value",
        [*S, "xla.flags.xla_gpu_enable_latency_hiding_scheduler=maybe"],
        "xla.flags.xla_gpu_enable_latency_hiding_scheduler",
        "cannot read the value",
        "of its type",
    ),
    ("env-name", [*S, "hardware.env.BAD-NAME=1"], "hardware.env.BAD-NAME", "environment variable name", "name it"),
    ("run-name-dotdot", [*S, "run.name=.."], "run.name", "single path component", "run.name=my-run"),
    ("run-name-escape", [*S, "run.name=../../etc"], "run.name", "single path component", "run.name=my-run"),
    ("experiment-name-path", [*S, "experiment_name=../x"], "experiment_name", "names a folder", "=smoke"),
    ("slurm-time", [*R, "target=slurm", "cluster.time_limit='2 hours'"], "cluster.time_limit", "Slurm time", "02:00"),
    (
        "slurm-partition",
        [*R, "target=slurm", "cluster.partition='gpu --qos=high'"],
        "cluster.partition",
        "not a Slurm name",
        "cluster.partition=gpu",
    ),
    (
        "compose-image",
        [*R, "target=compose", "cluster.image='x}$(id)'"],
        "cluster.image",
        "container image reference",
        "cluster.image=moekit:latest",
    ),
    ("tune-preset-name", ["tune", "experiment=smoke", "--name", "../evil"], "--name", "names a folder", "smoke_tuned"),
    # MaxText's own validator, before launch
    (
        "unknown-maxtext-key",
        [*S, "maxtext.extra.no_such_maxtext_key=1"],
        "maxtext.extra.no_such_maxtext_key",
        "MaxText has no key 'no_such_maxtext_key'",
        "correct the spelling or remove",
    ),
    (
        "maxtext-key-typo",
        [*S, "maxtext.extra.per_device_batch_sizee=2"],
        "maxtext.extra.per_device_batch_sizee",
        "MaxText has no key",
        "did you mean per_device_batch_size?",
    ),
    (
        "hf-without-path",
        [*S, "data.dataset_type=hf"],
        "data.files",
        "data=hf reads files, but data.files is not set",
        "data.files='/path/to/train-*.parquet'",
    ),
    # run directories (train run.dir=...)
    ("run-dir-is-file", [*S, "run.dir={tmp}/a-file"], "run.dir", "is a file, not a directory", "run.dir unset"),
    ("run-dir-below-file", [*S, "run.dir={tmp}/a-file/run"], "run.dir", "is a file, so", "leave run.dir unset"),
    ("run-dir-under-proc", [*S, "run.dir=/proc/moekit-run"], "run.dir", "cannot create /proc/moekit-run", "unset"),
    ("run-base-dir-under-proc", [*S, "run.base_dir=/proc/x"], "run.base_dir", "cannot create", "a folder you can"),
    ("run-dir-not-a-run", [*S, "run.dir={tmp}/notes"], "run.dir", "not a moekit run directory", "a new run.dir"),
    ("run-dir-finished", [*S, "run.dir={tmp}/finished"], "run.dir", "holds a finished run", "choose a new run.dir"),
    ("run-dir-corrupt-manifest", [*S, "run.dir={tmp}/corrupt"], "run.dir", "manifest.json is corrupt", "new run.dir"),
    (
        "run-dir-other-config",
        [*S, "run.dir={tmp}/other"],
        "run.dir",
        "different configuration (train.steps: 3 -> 10)",
        "resume with the overrides it was started with",
    ),
    ("run-dir-in-use", [*S, "run.dir={tmp}/busy"], "run.dir", "in use by another `moekit train`", "wait for it"),
    ("run-dir-in-use-dry-run", [*S, "run.dir={tmp}/busy", "--dry-run"], "run.dir", "in use by another", "wait"),
    # report on missing, damaged or empty runs
    ("report-missing", ["report", "{tmp}/missing"], "{tmp}/missing", "is not a directory", "moekit train"),
    ("report-not-a-run", ["report", "{tmp}/notes"], "{tmp}/notes", "not a moekit run directory", "moekit train"),
    ("report-no-metrics", ["report", "{tmp}/nometrics"], "{tmp}/nometrics", "no metrics file", "maxtext.log"),
    ("report-empty-run", ["report", "{tmp}/emptyrun"], "{tmp}/emptyrun", "holds no completed step", "maxtext.log"),
    ("report-corrupt-metrics", ["report", "{tmp}/corruptmetrics"], "metrics.jsonl", "not a MaxText metrics", "corrupt"),
    # secrets reached by interpolation: a resolved value passes the same rules as a literal one
    (
        "secret-env-into-experiment-name",
        [*S, "experiment_name=${oc.env:WANDB_API_KEY}"],
        "experiment_name",
        "takes its value from ${oc.env:WANDB_API_KEY}, a secret",
        "drop the interpolation from experiment_name",
    ),
    (
        "secret-env-default-into-label",
        [*R, "target=jobset", "cluster.node_selector.team=${oc.env:GITHUB_TOKEN,none}"],
        "cluster.node_selector.team",
        "${oc.env:GITHUB_TOKEN}, a secret",
        "a secret goes under a secret name only",
    ),
    (
        "secret-key-into-env",
        [*S, "maxtext.extra.hf_access_token=hf_abcdef123", "xla.env.NOTE=${maxtext.extra.hf_access_token}"],
        "xla.env.NOTE",
        "takes its value from ${maxtext.extra.hf_access_token}, a secret",
        "drop the interpolation from xla.env.NOTE",
    ),
    (
        "secret-through-two-keys",
        [*R, "target=compose", "network.env.A=${oc.env:DB_PASSWORD}", "cluster.name=x${network.env.A}"],
        "cluster.name",
        "(which holds ${oc.env:DB_PASSWORD})",
        "drop the interpolation from cluster.name",
    ),
    (
        "listed-secret-into-run-name",
        [*S, "run.secrets=[SITE_CONF]", "run.name=run-${oc.env:SITE_CONF,x}"],
        "run.name",
        "${oc.env:SITE_CONF}, a secret",
        "drop the interpolation from run.name",
    ),
    # interpolations that cannot be resolved: the key that holds one is named
    (
        "interpolation-unset-env",
        [*S, "hardware.env.SITE=${oc.env:MOEKIT_SURELY_UNSET_VARIABLE}"],
        "hardware.env.SITE",
        "cannot be resolved",
        "export MOEKIT_SURELY_UNSET_VARIABLE",
    ),
    ("interpolation-missing-key", [*S, "train.seed=${train.nope}"], "train.seed", "'train.nope' not found", "exists"),
    (
        "interpolation-missing-key-render",
        [*R, "target=slurm", "cluster.account=${cluster.acount}"],
        "cluster.account",
        "cannot be resolved",
        "interpolate a key that exists",
    ),
    (
        "interpolation-loop",
        [*S, "hardware.env.A=${hardware.env.B}", "hardware.env.B=${hardware.env.A}"],
        "hardware.env.A",
        "cannot be resolved",
        "interpolate a key that exists",
    ),
    # values that would pass composition and fail (or train wrongly) only after launch
    ("run-name-too-long", [*S, "run.name=" + "r" * 200], "run.name", "at most 128", "run.name=my-run"),
    ("run-name-too-long-dry-run", [*S, "--dry-run", "run.name=" + "n" * 129], "run.name", "at most 128", "my-run"),
    (
        "run-name-multibyte",
        [*S, "run.name='" + "\u00e9" * 70 + "'"],
        "run.name",
        "140 bytes (UTF-8); at most 128",
        "run.name=my-run",
    ),
    ("experiment-name-too-long", [*S, "experiment_name=" + "e" * 150], "experiment_name", "at most 128", "=smoke"),
    ("run-dir-long-folder", [*S, "run.dir={tmp}/" + "d" * 256], "run.dir", "at most 255", "shorter folder names"),
    ("steps-beyond-int64", [*S, "train.steps=9223372036854775808"], "train.steps", "64-bit", "train.steps=10"),
    ("seed-beyond-32-bits", [*S, "train.seed=4294967296"], "train.seed", "low 32 bits", "train.seed=0"),
    ("seed-negative", [*S, "train.seed=-5"], "train.seed", "outside 0..4294967295", "train.seed=0"),
    (
        "checkpoint-beyond-int64",
        [*S, "checkpoint.every=1e30"],
        "checkpoint.every",
        "exceeded maximum size",
        "checkpoint.every=0",
    ),
    (
        "timeout-beyond-int64",
        [*S, "cluster.rendezvous_timeout_s=99999999999999999999"],
        "cluster.rendezvous_timeout_s",
        "64-bit",
        "=300",
    ),
    ("learning-rate-inf", [*S, "train.learning_rate=inf"], "train.learning_rate", "not a finite", "=3e-05"),
    ("learning-rate-nan", [*S, "train.learning_rate=nan"], "train.learning_rate", "nan", "train.learning_rate"),
    ("routing-nan", [*S, "model.extra.routed_scaling_factor=nan"], "routed_scaling_factor", "not a finite", "finite"),
    ("stall-timeout-inf", [*S, "run.stall_timeout_s=inf"], "run.stall_timeout_s", "not a finite", "fix"),
    (
        "batch-inf-dry-run",
        [*S, "--dry-run", "train.per_device_batch_size=inf"],
        "per_device_batch_size",
        "finite",
        "fix",
    ),
    # Hydra's own settings and removed groups: silently ignored or unhelpful before
    ("hydra-run-dir", [*S, "hydra.run.dir={tmp}/x"], "hydra.run.dir", "no effect", "run.dir=PATH"),
    ("hydra-job-chdir", [*S, "hydra.job.chdir=true"], "hydra.job.chdir", "Hydra's own settings", "never changes"),
    ("hydra-launcher", [*S, "hydra/launcher=joblib"], "hydra/launcher", "Hydra's own settings", "drop it"),
    ("remove-required-group", [*S, "~hardware"], "~hardware", "every config needs one", "hardware=cpu"),
    ("remove-section", [*S, "~parallelism"], "~parallelism", "every config has", "parallelism.KEY=VALUE"),
    ("format-without-dry-run", [*S, "--format", "json"], "--format json", "--dry-run only", "drop --format"),
    (
        "format-with-sweep",
        ["train", "-m", "experiment=smoke", "train.steps=1,2", "--format", "json"],
        "-m",
        "sweep",
        "drop",
    ),
    # run directories that are links leading nowhere
    ("run-dir-dangling-link", [*S, "run.dir={tmp}/dangling"], "run.dir", "which does not exist", "mkdir -p"),
    ("run-dir-link-loop", [*S, "run.dir={tmp}/looping/run"], "run.dir", "a loop of links", "remove the link"),
    ("run-dir-link-loop-dry-run", [*S, "--dry-run", "run.dir={tmp}/looping"], "run.dir", "loop", "remove the link"),
    # render's output: nothing replaced, nothing half-written
    (
        "render-out-directory",
        [*R, "target=jobset", "-o", "{tmp}/notes"],
        "-o {tmp}/notes",
        "is a directory",
        "file path",
    ),
    (
        "render-out-unwritable",
        [*R, "target=slurm", "-o", "/proc/moekit-render/job.sh"],
        "-o /proc/moekit-render/job.sh",
        "could not write it",
        "a folder you can write to",
    ),
    (
        "render-refresh-unreadable-header",
        ["render", "--refresh", "{tmp}/manifests-quote"],
        "{tmp}/manifests-quote/b.yaml",
        "'# render:' line cannot be read",
        "render it again",
    ),
    (
        "render-refresh-foreign-header",
        ["render", "--refresh", "{tmp}/manifests-foreign"],
        "{tmp}/manifests-foreign/b.yaml",
        "is not a `moekit render` command",
        "render it again",
    ),
    (
        "render-refresh-bad-override",
        ["render", "--refresh", "{tmp}/manifests-badkey"],
        "{tmp}/manifests-badkey/b.yaml (from its '# render:' line)",
        "unknown config key 'train.stepz'",
        "did you mean train.steps?",
    ),
    # damaged, foreign, unfinished and read-only run directories
    ("report-config-wrong-type", ["report", "{tmp}/wrongtypes"], "config.yaml: cluster", "not a mapping", "restore"),
    (
        "report-config-wrong-number",
        ["report", "{tmp}/wrongsteps"],
        "train.steps",
        "not a positive whole",
        "moekit train",
    ),
    (
        "report-manifest-wrong-type",
        ["report", "{tmp}/badmanifest"],
        "{tmp}/badmanifest",
        "not a moekit manifest",
        "moekit train",
    ),
    ("report-sweep-folder", ["report", "{tmp}/sweep"], "is a sweep folder", "its runs are 0, 1", "fix: moekit report"),
    (
        "report-out-unwritable",
        ["report", "{tmp}/finished", "--out", "/proc/moekit-report"],
        "/proc",
        "cannot write",
        "--out",
    ),
    ("run-dir-foreign-manifest", [*S, "run.dir={tmp}/badmanifest"], "run.dir", "not a moekit manifest", "new run.dir"),
    # verify's reference: finished, or nothing trains
    (
        "verify-failed-reference",
        ["verify", "--reference", "{tmp}/other", "--candidate", "moe=dense"],
        "--reference {tmp}/other",
        "no metrics file",
        "give a run that finished",
    ),
    (
        "verify-killed-reference",
        ["verify", "--reference", "{tmp}/killed", "--candidate", "moe=dense"],
        "--reference {tmp}/killed",
        "the run is unfinished",
        "give a run that finished",
    ),
    (
        "verify-short-reference",
        ["verify", "--reference", "{tmp}/finished", "--candidate", "moe=dense"],
        "--reference {tmp}/finished",
        "its metrics hold 1 of train.steps=",
        "drop --reference to train one",
    ),
    # fix hints that point the right way
    (
        "label-list-value",
        [*R, "target=jobset", "cluster.node_selector.pool=[a,b]"],
        "cluster.node_selector.pool",
        "valid string",
        "give cluster.node_selector.pool one plain value",
    ),
    ("env-mapping-value", [*S, "hardware.env.K={a: 1}"], "hardware.env.K", "valid string", "one plain value"),
    (
        "mesh-with-fill-axis-set",
        [*S, "parallelism.ici.expert=3"],
        "parallelism.ici",
        "does not match 1 devices per slice",
        "fix: parallelism.ici.expert=1 (the axis at -1, fsdp, then fills",
    ),
    (
        "mesh-two-fixed-axes",
        [*S, "cluster.processes_per_node=2", "parallelism.ici.data=4", "parallelism.ici.tensor=2"],
        "parallelism.ici",
        "does not match 2 devices",
        "parallelism.ici.data=2 parallelism.ici.tensor=1",
    ),
    ("experiment-partial-name", ["train", "experiment=mixtral"], "experiment=", "closest names", "=mixtral_8x22b_"),
    ("experiment-typo", ["train", "experiment=smoke-cpu"], "experiment=", "closest names", "fix: experiment=smoke"),
    # tune: refused up front, before its sweep folder and its first run
    (
        "tune-gpu-base-on-cpu",
        ["tune", "experiment=qwen3_235b_proxy_h200", "--axis", "train.seq_len=128,256", "--out", "{tmp}/tune"],
        "hardware=h200",
        "cannot run on this host; nothing was launched",
        "tune the CPU form here: moekit tune experiment=smoke",
    ),
    (
        "tune-preset-exists",
        ["tune", "experiment=smoke", "--name", "smoke_gpu", "--write-preset", "--out", "{tmp}/tune"],
        "--write-preset",
        "smoke_gpu.yaml exists, and a tune never replaces an experiment file",
        "--name smoke_gpu_2",
    ),
    # the command line itself
    ("unknown-command", ["trian"], "COMMAND", "invalid choice: 'trian'", "did you mean train?"),
    ("dry-run-format", [*S, "--dry-run", "--format", "xml"], "--format", "invalid choice: 'xml'", "choose from"),
    ("flag-typo", [*S, "--dryrun"], "--dryrun", "unrecognized arguments", "did you mean --dry-run (for --dryrun)?"),
]


def _config_yaml(overrides: list[str]) -> str:
    return yaml.safe_dump(redact.redact_tree(compose("smoke", overrides).to_dict()), sort_keys=False)


def _manifest(status: str) -> str:
    return json.dumps({"status": status, "overrides": ["experiment=smoke"]})


def _populate(tmp: Path) -> None:
    """Run directories in every state a user can point at."""
    (tmp / "a-file").write_text("not a directory\n")
    (tmp / "notes").mkdir()
    (tmp / "notes" / "todo.txt").write_text("my notes\n")
    step = {"step": 0, "learning/loss": 10.0, "perf/step_time_seconds": 1.0}
    for name, status, overrides in [
        ("finished", "ok", []),
        ("other", "failed", ["train.steps=3"]),
        ("busy", "failed", [f"run.dir={tmp}/busy"]),
        ("nometrics", "failed", []),
        ("emptyrun", "failed", []),
        ("corruptmetrics", "ok", []),
    ]:
        d = tmp / name
        d.mkdir()
        (d / "manifest.json").write_text(_manifest(status))
        (d / "config.yaml").write_text(_config_yaml(overrides))
    (tmp / "finished" / "metrics.jsonl").write_text(json.dumps(step) + "\n")
    (tmp / "emptyrun" / "metrics.jsonl").write_text("")
    (tmp / "corruptmetrics" / "metrics.jsonl").write_text(json.dumps(step) + "\n{garbage\n" + json.dumps(step) + "\n")
    for name, status, overrides in [("killed", "running", []), ("wrongtypes", "ok", []), ("wrongsteps", "ok", [])]:
        d = tmp / name
        d.mkdir()
        (d / "manifest.json").write_text(_manifest(status))
        (d / "config.yaml").write_text(_config_yaml(overrides))
        (d / "metrics.jsonl").write_text(json.dumps(step) + "\n")
    (tmp / "killed" / ".moekit.lock").write_text("")  # left by a `moekit train` killed with SIGKILL
    (tmp / "wrongtypes" / "config.yaml").write_text("cluster: 5\ntrain: {steps: 2}\n")
    (tmp / "wrongsteps" / "config.yaml").write_text("train: {steps: ten}\n")
    (tmp / "badmanifest").mkdir()
    (tmp / "badmanifest" / "manifest.json").write_text(json.dumps({"status": "ok", "overrides": 5}))
    (tmp / "badmanifest" / "config.yaml").write_text(_config_yaml([]))
    (tmp / "badmanifest" / "metrics.jsonl").write_text(json.dumps(step) + "\n")
    for i in (0, 1):  # a sweep folder: `train -m` puts each run in <folder>/<index>
        (tmp / "sweep" / str(i)).mkdir(parents=True)
        (tmp / "sweep" / str(i) / "manifest.json").write_text(_manifest("ok"))
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    (tmp / "looping").symlink_to(tmp / "looping")
    good = render_cmd.render(["target=jobset", "experiment=smoke"])[0]
    for folder, header in [
        ("manifests-quote", "# render: moekit render target=jobset 'experiment=smoke\n"),
        ("manifests-foreign", "# render: kubectl apply -f b.yaml\n"),
        ("manifests-badkey", "# render: moekit render target=jobset experiment=smoke train.stepz=3\n"),
    ]:
        (tmp / folder).mkdir()
        (tmp / folder / "a.yaml").write_text(good)  # renders fine, and must not be replaced either
        (tmp / folder / "b.yaml").write_text(header + "kind: JobSet\n")
    (tmp / "corrupt").mkdir()
    (tmp / "corrupt" / "manifest.json").write_text('{"status": "runn')
    (tmp / "corrupt" / "config.yaml").write_text(_config_yaml([]))


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def playground(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-inputs")
    _populate(tmp)
    return tmp


def _argv(argv: list[str], tmp: Path, port: str) -> list[str]:
    argv = [a.replace("{tmp}", str(tmp)).replace("{port}", port) for a in argv]
    return [*argv, f"run.base_dir={tmp}/outputs"] if argv[0] == "train" and "run.base_dir" not in str(argv) else argv


@contextlib.contextmanager
def _taken_port():
    taken = socket.socket()  # a port another job listens on
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        yield str(taken.getsockname()[1])
    finally:
        taken.close()


@pytest.mark.parametrize("case, argv, field, problem, fix", CASES, ids=[c[0] for c in CASES])
def test_bad_input(case, argv, field, problem, fix, playground):
    if case in ("gpu-config-without-gpu", "tune-gpu-base-on-cpu") and Path("/dev/nvidia0").exists():
        pytest.skip("this host has a GPU")
    before = _snapshot(playground)
    lock = None
    if case.startswith("run-dir-in-use"):  # another `moekit train` holds the run
        lock = os.open(playground / "busy" / ".moekit.lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with _taken_port() as port:
            proc = moekit(*_argv(argv, playground, port), timeout=300)
    finally:
        if lock is not None:
            os.close(lock)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    assert field.replace("{tmp}", str(playground)) in out, out
    assert problem in out, out
    assert fix in out, out
    after = _snapshot(playground)
    for snap in (before, after):
        snap.pop("busy/.moekit.lock", None)
    assert after == before, "a file was written or changed"
    assert not (playground / "outputs").exists(), "a run directory was created"
    assert "maxtext.log" not in " ".join(after), "a process was launched"


def test_the_table_is_large_enough():
    assert len(CASES) >= 130 and len({c[0] for c in CASES}) == len(CASES)


# ---- every fix a message spells out is itself accepted ----

_OVERRIDE = re.compile(r"(?<![\w.$-])((?:[a-z_]+)(?:\.[A-Za-z0-9_-]+)*=[A-Za-z0-9_./:-]+)")


def _suggested(out: str) -> list[list[str]]:
    """The overrides each fix alternative spells out ("fix: a=1 or b=2", "did you mean a=1?")."""
    groups = []
    for line in out.splitlines():
        if "fix:" not in line.lower() and "did you mean" not in line:
            continue
        text = line.split("fix:", 1)[-1] if "fix:" in line.lower() else line
        for chunk in re.split(r"\bor\b|[,;(]", text):
            found = [o for o in _OVERRIDE.findall(chunk) if "VALUE" not in o and not o.startswith("target=")]
            if found:
                groups.append(found)
    return groups


def _applied(argv: list[str], fix: list[str], fault: str) -> list[list[str]]:
    """The ways to apply a fix: its overrides in place of those of the same key, and, for a fix that names a key
    the command does not have (train.stepz -> train.steps), also in place of the override at fault (the case's
    last, by the table's convention)."""
    keys = {o.split("=", 1)[0] for o in fix}
    kept = [a for a in argv if a.split("=", 1)[0].lstrip("+~") not in keys]
    ways = [kept + fix]
    if len(kept) == len(argv):
        ways.append([a for a in kept if a != fault] + fix)
    return ways


def _problems_of(argv: list[str]) -> set[str]:
    """What the command refuses before it launches or writes, computed in this process: composing, the checks,
    and the cheap host probes where this host is the job's target (a fix cannot give this host GPUs). The
    coordinator port counts only where the case is about it: the default port may be taken on a shared host."""
    overrides = [a for a in argv[1:] if not a.startswith("-")]
    try:
        if argv[0] == "render":
            name, rest = render_cmd.split_target(overrides)
            overrides = [*rest, f"cluster={render_cmd.TARGETS[name].cluster}"]
        cfg = compose(None, overrides)
    except MoekitError as exc:
        return {str(exc)}
    found = {f"{p.key}: {p.what}" for p in problems(cfg)}
    if found or argv[0] == "render":
        return found
    host = preflight.Host({}, redact.redact_tree(cfg.to_dict()))
    if not preflight.is_target(cfg, host)[0]:
        return set()
    skip = () if "cluster.coordinator_port" in " ".join(argv) else (preflight.coordinator_port_free,)
    cheap = [probe for probe in preflight.PROBES if not probe.costly and probe.check not in skip]
    return {f"{p.key}: {p.what}" for probe in cheap for p in probe.check(cfg, host)}


FIXABLE = [c for c in CASES if c[1][0] in ("train", "render") and "{tmp}" not in " ".join(c[1])]
# Cases whose fix is prose (a spelling to correct, a file to write, a value to choose), not an override to apply:
# their messages must offer none (or this list hides a fix nobody applies). Listed 2026-12-07.
PROSE_FIX = {
    "override-bad-syntax",
    "unknown-section",
    "precision-name",
    "no-experts",
    "top-k-over-experts",
    "axis-zero",
    "two-fill-axes",
    "dcn-fill",
    "batch-fraction",
    "batch-over-dp",
    "jobset-outside-pod",
    "render-no-target",
    "jobset-inline-secret",
    "slurm-newline-in-name",
    "jobset-newline-in-env",
    "line-separator",
    "bidi-override",
    "xla-flag-value-quote",
    "xla-flag-name",
    "xla-flags-through-env",
    "env-name",
    "secret-env-into-experiment-name",
    "secret-env-default-into-label",
    "secret-through-two-keys",
    "listed-secret-into-run-name",
    "interpolation-unset-env",
    "interpolation-missing-key",
    "interpolation-missing-key-render",
    "interpolation-loop",
    "routing-nan",
    "stall-timeout-inf",
    "hydra-job-chdir",
    "hydra-launcher",
    "remove-section",
    "format-without-dry-run",
    "format-with-sweep",
    "render-out-unwritable",
    "label-list-value",
    "env-mapping-value",
    "dry-run-format",
}


@pytest.mark.parametrize("case, argv, field, problem, fix", FIXABLE, ids=[c[0] for c in FIXABLE])
def test_suggested_fixes_are_accepted(case, argv, field, problem, fix, tmp_path, capsys):
    if case == "gpu-config-without-gpu" and Path("/dev/nvidia0").exists():
        pytest.skip("this host has a GPU")
    fault = next(a for a in reversed(argv) if a != "--dry-run")
    with _taken_port() as port:
        argv = _argv(argv, tmp_path, port)
        if any(_is_costly(argv)):
            pytest.skip("refused by a costly probe (MaxText, XLA): its fix names no override to apply")
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
        out = capsys.readouterr().err
        assert code == 2, out
        flag = re.search(r"did you mean (--[\w-]+)", out)
        if flag:  # a mistyped option: the suggested one parses
            cli.parse([flag.group(1) if a == fault else a for a in argv])
        groups = _suggested(out)
        if case in PROSE_FIX:
            assert groups == [], f"{case} now suggests {groups}: take it off PROSE_FIX"
            return
        assert groups or flag, f"{case}: its message offers no override to apply (a prose fix? list it in PROSE_FIX)"
        before = _problems_of(argv)
        for group in groups:
            # The fix removes its problem and adds none (a case with two problems keeps the other one).
            afters = [_problems_of(way) for way in _applied(argv, group, fault)]
            assert any(not after or after < before for after in afters), f"the suggested fix {group} leaves {afters}"


def _is_costly(argv: list[str]):
    return (a.startswith(("maxtext.extra.", "data.dataset_type=", "xla.flags.xla_gpu_enable_latency")) for a in argv)


def test_fix_suggestions_are_found():
    """The extraction above finds what messages offer (or the test would pass by finding nothing)."""
    assert _suggested("  fix: use precision=fp8 (Hopper) or precision=bf16") == [["precision=fp8"], ["precision=bf16"]]
    assert _suggested("  did you mean moe=ragged_dot?\n  fix: moe=ragged_dot") == [["moe=ragged_dot"]] * 2
    assert _suggested("    fix: cluster.gpus_per_node=2 cluster.processes_per_node=2 (or more GPUs)") == [
        ["cluster.gpus_per_node=2", "cluster.processes_per_node=2"]
    ]


# ---- `make smoke` on a machine without Python >= 3.12 ----


def _bin_without_python312(tmp: Path) -> Path:
    """A PATH with the tools `make smoke` needs and only an old python3 (or none)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "cat", "env"):
        (bin_dir / tool).symlink_to(Path("/usr/bin") / tool if Path(f"/usr/bin/{tool}").exists() else f"/bin/{tool}")
    old = Path("/usr/bin/python3")
    if old.exists():
        (bin_dir / "python3").symlink_to(old)  # Debian 12: 3.11, too old for MaxText 0.2.5
    return bin_dir


def _old_or_no_python() -> None:
    probe = (
        subprocess.run(
            ["/usr/bin/python3", "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True, text=True
        )
        if Path("/usr/bin/python3").exists()
        else None
    )
    if probe is not None and probe.stdout.strip() == "True":
        pytest.skip("/usr/bin/python3 is already >= 3.12 here")


def test_find_python_explains_what_to_install(tmp_path):
    _old_or_no_python()
    env = {
        "PATH": str(_bin_without_python312(tmp_path)),
        "PYENV_ROOT": str(tmp_path / "no-pyenv"),
        "HOME": str(tmp_path),
    }
    proc = subprocess.run([str(REPO / "scripts" / "find-python")], capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "needs Python >= 3.12" in proc.stderr and "pyenv install 3.12" in proc.stderr


def test_find_python_rejects_a_wrong_PYTHON(tmp_path):
    env = {"PATH": str(_bin_without_python312(tmp_path)), "PYTHON": str(tmp_path / "python9"), "HOME": str(tmp_path)}
    proc = subprocess.run([str(REPO / "scripts" / "find-python")], capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode != 0
    assert "is not a runnable Python >= 3.12" in proc.stderr


def test_make_smoke_without_python312_creates_nothing(tmp_path):
    _old_or_no_python()
    venv = tmp_path / "venv"
    env = {
        "PATH": str(_bin_without_python312(tmp_path)),
        "PYENV_ROOT": str(tmp_path / "no-pyenv"),
        "HOME": str(tmp_path),
    }
    proc = subprocess.run(
        ["/usr/bin/make", "-C", str(REPO), "smoke", f"VENV={venv}"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode != 0
    assert "needs Python >= 3.12" in proc.stderr and "make smoke PYTHON=" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not venv.exists()


def test_fewer_gpus_than_configured(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    host = preflight.Host({}, dev=tmp_path)
    cfg = compose("smoke", ["hardware=h200", "moe=tokamax", "cluster.gpus_per_node=8", "cluster.processes_per_node=8"])
    (found,) = preflight.gpus_present(cfg, host)
    assert re.search(r"gpus_per_node=8, but this host has 2 GPU\(s\).*gpus_per_node=2", str(found), re.S)
    assert not list(
        preflight.gpus_present(compose("smoke", ["hardware=h200", "moe=tokamax", "cluster.gpus_per_node=2"]), host)
    )


def test_te_backend_without_transformer_engine():
    # This environment has no TransformerEngine (the CPU stack): moe=te must stop before launching.
    import importlib.util

    assert importlib.util.find_spec("transformer_engine") is None
    host = preflight.Host({})
    (found,) = preflight.packages_present(compose("dsv3_proxy_h200", ["moe=te"]), host)
    assert re.search(r"moe=te: transformer_engine is not importable.*moe=tokamax", str(found), re.S)
    assert not list(preflight.packages_present(compose("dsv3_proxy_h200", []), host))  # other back ends need no TE


# ---- values arrive as typed: an environment variable or a node label is text ----

AS_TYPED = [  # override, the variable or label, the text that must arrive
    ("cluster.env.LIB_VERSION=1.10", "LIB_VERSION", "1.10"),
    ("hardware.env.LIMIT=1e3", "LIMIT", "1e3"),
    ("network.env.ZIP=007", "ZIP", "007"),
    ("xla.env.ENABLED=true", "ENABLED", "true"),
    ("memory.env.HEX=0x1F", "HEX", "0x1F"),
    ("cluster.env.ON=true", "ON", "true"),
    ("cluster.env.OCT=0o17", "OCT", "0o17"),
    ("cluster.env.SEP=1_000", "SEP", "1_000"),
    ("cluster.env.BIG=.5e-3", "BIG", ".5e-3"),
]


@pytest.mark.parametrize("override, name, text", AS_TYPED, ids=[c[1] for c in AS_TYPED])
def test_environment_values_arrive_as_typed(override, name, text):
    """In a run's environment (dry-run JSON) and in a render (Compose), exactly the text typed."""
    if not override.startswith("cluster.env."):  # the process environment of a run (a pod's composes it again)
        proc = moekit(*S, override, "--dry-run", "--format", "json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["env"][name] == text
        return
    proc = moekit(*R, "target=compose", override)  # cluster.env is written into the rendered services
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    assert {s["environment"][name] for s in services.values()} == {text}


def test_node_selector_values_arrive_as_typed():
    proc = moekit(*R, "target=jobset", "cluster.node_selector.gpu=true", "cluster.node_selector.rev=2.10")
    assert proc.returncode == 0, proc.stderr
    spec = yaml.safe_load(proc.stdout)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gpu": "true", "rev": "2.10"}


# ---- user config files (MOEKIT_CONF_DIR) that are not valid YAML ----

CONF_FILES = [  # id, file under conf/, its text, words naming the problem, words of the fix
    ("yaml-syntax", "experiment/mine.yaml", "train:\n  steps: [1,\n", "not valid YAML", "correct the file"),
    ("yaml-tab", "experiment/mine.yaml", "train:\n\tsteps: 3\n", "not valid YAML", "at that line"),
    ("duplicate-key", "experiment/mine.yaml", "train:\n  steps: 3\n  seed: 1\n  steps: 4\n", "duplicate key", "one"),
    ("duplicate-top-key", "model/mine.yaml", "name: a\nname: b\n", "found duplicate key name", "keep one name:"),
    (
        "python-tag",
        "experiment/mine.yaml",
        "x: !!python/object/apply:os.system ['touch {canary}']\n",
        "the YAML tag !!python/object/apply:os.system is not allowed",
        "remove the tag",
    ),
    ("custom-tag", "local/default.yaml", "run:\n  name: !env HOME\n", "tag !env is not allowed", "remove the tag"),
    ("not-utf8", "experiment/mine.yaml", "name: caf\udce9\n", "not UTF-8 text", "save it as UTF-8"),
    (
        "missing-package-line",
        "experiment/mine.yaml",
        "defaults:\n  - override /model: deepseek3_tiny\n",
        "Could",
        "@package",
    ),
    ("unknown-option-in-file", "experiment/mine.yaml", "defaults:\n  - override /moe: fast\n", "moe=", "defaults list"),
]


@pytest.mark.parametrize("case, name, text, problem, fix", CONF_FILES, ids=[c[0] for c in CONF_FILES])
def test_user_config_file_errors(case, name, text, problem, fix, tmp_path):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    canary = tmp_path / "canary"
    (conf / name).parent.mkdir(exist_ok=True)
    head = "# @package _global_\n" * (name.startswith("experiment/") and case != "missing-package-line")
    (conf / name).write_bytes((head + text.format(canary=canary)).encode("utf8", "surrogateescape"))
    group, option = name.removesuffix(".yaml").split("/")
    chosen = [f"{group}={option}"] if group != "local" else []
    for argv in (["train", "experiment=smoke", *chosen, "--dry-run"], ["config", "show", *chosen]):
        proc = moekit(*argv, env={"MOEKIT_CONF_DIR": str(conf)})
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and "Traceback" not in out, out
        named = str(conf / name) in out or case == "unknown-option-in-file"  # Hydra names no file for that one
        assert named and problem in out and fix in out, out
    assert not canary.exists(), "a YAML tag was executed"


# ---- render's output on a full disk, and standard output on a full disk ----


def test_render_on_a_full_disk_keeps_the_old_manifest(tmp_path):
    from conftest import mount_tmpfs

    disk = tmp_path / "disk"
    mount_tmpfs(disk, "16k")
    try:
        target = disk / "job.yaml"
        assert moekit(*R, "target=jobset", "-o", str(target)).returncode == 0
        old = target.read_bytes()
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:  # fill the disk
            while os.write(fd, b"x" * 1024):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        proc = moekit(*R, "target=jobset", "train.steps=7", "-o", str(target))
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and "Traceback" not in out, out
        assert f"-o {target}" in out and "No space left" in out and "the existing file is unchanged" in out, out
        assert "free space there" in out
        assert target.read_bytes() == old
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "job.yaml"], "a temporary file was left"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize("argv", [[*R, "target=slurm"], [*S, "--dry-run", "--format", "json"], ["config", "groups"]])
def test_standard_output_on_a_full_disk(argv):
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "moekit", *argv], stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO
        )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "could not write standard output (No space left on device)" in proc.stderr
    assert "fix: free space" in proc.stderr


def test_refresh_replaces_nothing_when_one_file_fails(playground):
    """--refresh renders every file before it writes any: the good file beside a broken one is untouched."""
    folder = playground / "manifests-badkey"
    before = (folder / "a.yaml").read_bytes()
    assert moekit("render", "--refresh", str(folder)).returncode == 2
    assert (folder / "a.yaml").read_bytes() == before


# ---- a run killed with SIGKILL is reported as unfinished, never as running ----


def test_report_of_a_killed_run_says_unfinished(playground, tmp_path):
    proc = moekit("report", str(playground / "killed"), "--out", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr
    assert "unfinished" in proc.stdout and "running" not in proc.stdout, proc.stdout


# ---- the README's first-hour commands, run as printed ----


def _readme_command(words: str) -> list[str]:
    """The README line holding `words`, as argv after `moekit` (without its comment and redirect)."""
    import shlex

    line = next(ln for ln in (REPO / "README.md").read_text().splitlines() if words in ln)
    argv = shlex.split(line.split("#", 1)[0].split(">", 1)[0])
    return argv[argv.index(next(a for a in argv if a.endswith("moekit"))) + 1 :]


def test_readme_two_node_compose_render_warns_nothing():
    argv = _readme_command("target=compose cluster.nodes=2")
    proc = moekit(*argv)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    assert len(yaml.safe_load(proc.stdout)["services"]) == 2


def test_readme_gpu_tune_on_cpu_says_so_up_front(tmp_path):
    if Path("/dev/nvidia0").exists():
        pytest.skip("this host has a GPU")
    argv = _readme_command("tune experiment=dsv3_proxy_h200")
    proc = moekit(*argv, "--out", str(tmp_path / "tune"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out
    assert out.count("moekit: error:") == 1 and "tune the CPU form here: moekit tune experiment=smoke" in out
    cpu_form = out.split("tune the CPU form here: ", 1)[1].split()[:4]
    assert " ".join(cpu_form) in (REPO / "README.md").read_text()  # the CPU form is the README's own line
    assert not (tmp_path / "tune").exists()
