"""Secrets never land on disk or in output: planted tokens are searched for in every file a run wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from subprocess import PIPE

import pytest
import yaml

from conftest import REPO, compose, moekit
from moekit.base import redact
from moekit.translate.job import build

# Planted values: each one must never appear anywhere moekit or MaxText writes.
from moekit.worker import process as worker

HF = "hf_plantedTokenValue0123456789"
WANDB = "wandb0123456789plantedKEY"
SITE = "site-conf-planted-4711"
EXTRA = "hfExtraPlanted98765"
CFG_ENV = "cfgEnvPlanted55555"
PLANTED = (HF, WANDB, SITE, EXTRA, CFG_ENV)

ENV = {"HF_TOKEN": HF, "WANDB_API_KEY": WANDB, "NCCL_SITE_CONF": SITE}
OVERRIDES = [
    "run.secrets=[NCCL_SITE_CONF,MY_SITE_VAR]",  # NCCL_* is recorded; the config marks this one secret
    f"maxtext.extra.hf_access_token={EXTRA}",
    f"hardware.env.MY_SITE_VAR={CFG_ENV}",
]


@pytest.mark.parametrize(
    "name, secret",
    [
        ("HF_TOKEN", True),
        ("hf_access_token", True),
        ("WANDB_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("GITHUB_TOKEN", True),
        ("HFTOKEN", True),
        ("ghApiKey", True),
        ("my_credentials_file", True),
        ("key_proj", False),  # a MaxText remat tensor, not a credential
        ("MAX_TOKENS", False),
        ("tokenizer_path", False),
        ("NCCL_IB_HCA", False),
        ("XLA_FLAGS", False),
        ("PATH", False),
        ("MONKEY", False),
    ],
)
def test_secret_names(name, secret):
    assert redact.is_secret_name(name) is secret


def test_config_marks_further_names_secret():
    assert redact.is_secret_name("NCCL_SITE_CONF", ["nccl_site_conf"])


def test_numbers_are_not_secrets_but_strings_are():
    tree = {"model": {"experts_per_token": 2}, "maxtext": {"extra": {"hf_access_token": "abc123xyz"}}}
    assert redact.redact_tree(tree) == {
        "model": {"experts_per_token": 2},
        "maxtext": {"extra": {"hf_access_token": "<redacted>"}},
    }
    assert redact.secret_values({"HF_TOKEN": "x" * 8, "HOME": "/root"}, tree) == {"x" * 8, "abc123xyz"}


def test_scrubber_replaces_values_anywhere_in_text():
    scrub = redact.Scrubber({HF, "ab"})  # too short a value is left alone: it would mangle every line
    assert scrub(f"Config param x: {HF}!") == "Config param x: <redacted>!"
    assert scrub("ab cd") == "ab cd"
    assert redact.redact_assignments([f"maxtext.extra.hf_access_token={EXTRA}", "train.steps=3"]) == [
        "maxtext.extra.hf_access_token=<redacted>",
        "train.steps=3",
    ]


def _assert_clean(text: str, where: str) -> None:
    for value in PLANTED:
        assert value not in text, f"a planted secret appears in {where}"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_dry_run_redacts(fmt, tmp_path):
    proc = moekit("train", "experiment=smoke", *OVERRIDES, "--dry-run", "--format", fmt, env=ENV)
    assert proc.returncode == 0, proc.stderr
    _assert_clean(proc.stdout + proc.stderr, "the dry-run output")
    assert "<redacted>" in proc.stdout
    if fmt == "json":
        view = json.loads(proc.stdout)
        assert view["env"]["MY_SITE_VAR"] == "<redacted>"
        assert "hf_access_token='<redacted>'" in view["maxtext_args"]


@pytest.mark.integration
def test_training_run_writes_no_secret(tmp_path):
    """A real run (with checkpoints, TensorBoard and MaxText's config log) with tokens in the environment and
    the config: no file under the run directory, and neither stdout nor stderr, contains one."""
    run = tmp_path / "run"
    argv = ["train", "experiment=smoke", "train.steps=2", "checkpoint.every=1", f"run.dir={run}", *OVERRIDES]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moekit", *argv], cwd=REPO, env=os.environ | ENV, stdout=PIPE, stderr=PIPE, text=True
    )
    seen = _watch_workers(run, proc)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err + out[-2000:]
    _assert_clean(out + err, "moekit's output")
    # Every user of the host can read a command line; the worker's never held the token. Its environment (readable
    # by its owner only) carried it, as HF_TOKEN, which MaxText reads itself.
    assert seen, "no worker was seen while the run ran"
    for cmdline, environ in seen:
        assert "hf_access_token" not in cmdline and EXTRA not in cmdline and "run_name=smoke" in cmdline
        assert f"HF_TOKEN={EXTRA}" in environ
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any("tfevents" in p.name for p in files) and any("checkpoints" in p.parts for p in files)
    for path in files:
        data = path.read_bytes()
        for value in PLANTED:
            assert value.encode() not in data, f"{path.relative_to(run)} contains a planted secret"
    job = json.loads((run / "job.json").read_text())
    assert job["inherited_env"]["HF_TOKEN"] == "<redacted>"
    assert job["inherited_env"]["NCCL_SITE_CONF"] == "<redacted>"
    assert job["env"]["MY_SITE_VAR"] == "<redacted>"
    assert "maxtext.extra.hf_access_token=<redacted>" in job["overrides"]
    # The process still got the real values (MaxText needs its token): the log shows the key, not the value.
    assert "hf_access_token" in (run / "job.json").read_text()


def _watch_workers(run, proc) -> list[tuple[str, str]]:
    """(command line, environment) of each moekit worker of `run`, read from /proc while `proc` runs."""
    seen: dict[int, tuple[str, str]] = {}
    while proc.poll() is None:
        for d in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if "moekit.worker" in cmdline and str(run) in cmdline and int(d.name) not in seen:
                    environ = (d / "environ").read_bytes().replace(b"\0", b"\n").decode(errors="replace")
                    seen[int(d.name)] = (cmdline, environ)
            except (OSError, ValueError):
                continue
        time.sleep(0.2)
    return list(seen.values())


def test_secret_arguments_stay_off_a_real_workers_command_line(tmp_path):
    """moekit's worker, with a stand-in for MaxText's trainer that reports its argv: a secret MaxText argument
    travels in the environment and joins sys.argv inside the process; /proc/PID/cmdline never shows it."""
    (tmp_path / "stub_trainer.py").write_text(
        "import json, os, sys, time\n"
        "print('ARGV ' + json.dumps(sys.argv), flush=True)\n"
        "print('LEFT ' + str('MOEKIT_SECRET_ARGS' in os.environ), flush=True)\n"
        "time.sleep(2)\n"
    )
    secret = "plantedApiKey0123456789"
    argv, env = worker.hide_secrets(
        [sys.executable, "-m", "moekit.worker", "stub_trainer", "run_name=r", f"wandb_api_key='{secret}'", "steps=3"],
        {"wandb_api_key"},
    )
    assert secret not in " ".join(argv) and json.loads(env[worker.SECRET_ARGS]) == [f"wandb_api_key='{secret}'"]
    proc = subprocess.Popen(
        argv, env=os.environ | env | {"PYTHONPATH": str(tmp_path)}, stdout=PIPE, stderr=subprocess.STDOUT, text=True
    )
    first = next(line for line in proc.stdout if line.startswith("ARGV "))  # after the worker's imports
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()  # while it runs
    rest = proc.stdout.read()  # to the end (communicate would skip what the line iterator has buffered)
    proc.wait(timeout=60)
    assert json.loads(first[5:])[1:] == [
        "run_name=r",
        "steps=3",
        f"wandb_api_key='{secret}'",
    ]
    assert "LEFT False" in rest  # not inherited by what the trainer starts
    assert secret not in cmdline and "wandb_api_key" not in cmdline and "steps=3" in cmdline


def test_hf_access_token_goes_where_maxtext_reads_it():
    argv, env = worker.hide_secrets(
        ["python", "-m", "moekit.worker", "m", "hf_access_token='hf_abc123xyz'"], {"hf_access_token"}
    )
    assert argv == ["python", "-m", "moekit.worker", "m"] and env == {"HF_TOKEN": "hf_abc123xyz"}


def test_secret_free_config_round_trips():
    """Redaction leaves everything that is not secret exactly as it was."""
    overrides = ["run.name=tokenizer-sweep", "train.seed=123456"]  # near secret-looking words and numbers
    proc = moekit("train", "experiment=smoke", *overrides, "--dry-run", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "<redacted>" not in proc.stdout
    shown = json.loads(proc.stdout)
    assert shown["config"] == json.loads(json.dumps(compose("smoke", overrides).to_dict()))
    job = build(compose("smoke", overrides), "<run.dir>", "<run.dir>/metrics.jsonl")
    assert shown["maxtext_args"] == job.maxtext_args


def test_jobset_takes_secrets_by_reference_only():
    proc = moekit(
        "render", "experiment=smoke", "target=jobset", "cluster.secrets=[{env: HF_TOKEN, secret: hf, key: token}]"
    )
    assert proc.returncode == 0, proc.stderr
    manifest = yaml.safe_load(proc.stdout)
    env = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    (hf,) = [e for e in env if e["name"] == "HF_TOKEN"]
    assert hf == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    inline = moekit("render", "experiment=smoke", "target=jobset", f"maxtext.extra.hf_access_token={EXTRA}")
    assert inline.returncode != 0 and EXTRA not in inline.stdout and "secretKeyRef" not in inline.stdout


# ---- secrets reached by interpolation: refused wherever they would land, by every command ----

INDIRECT = [
    ["train", "experiment=smoke", "--dry-run", "run.name=${oc.env:HF_TOKEN}"],
    ["train", "experiment=smoke", "hardware.env.NOTE=${oc.env:HF_TOKEN}"],
    ["train", "experiment=smoke", "--dry-run", "data.files=/d/${oc.env:WANDB_API_KEY,x}/*.parquet"],
    ["render", "experiment=smoke", "target=jobset", "cluster.env.NOTE=${oc.env:WANDB_API_KEY}"],
    ["render", "experiment=smoke", "target=compose", "cluster.node_selector.team=${oc.env:HF_TOKEN}"],
    [
        "render",
        "experiment=smoke",
        "target=slurm",
        "cluster.account=${hardware.env.HF_TOKEN}",
        f"hardware.env.HF_TOKEN={HF}",
    ],
    [
        "config",
        "show",
        "experiment=smoke",
        "maxtext.extra.log_period=${oc.env:NCCL_SITE_CONF}",
        "run.secrets=[NCCL_SITE_CONF]",
    ],
    ["plan", "experiment=smoke", "experiment_name=${oc.env:HF_TOKEN}"],
]


@pytest.mark.parametrize("argv", INDIRECT, ids=[a[-1].split("=")[0] + "-" + a[0] for a in INDIRECT])
def test_secret_by_interpolation_is_refused(argv, tmp_path):
    extra = [f"run.base_dir={tmp_path}"] if argv[0] == "train" else []
    proc = moekit(*argv, *extra, env=ENV)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out
    _assert_clean(out, "the refusal")
    assert "a secret" in out and "drop the interpolation from" in out, out
    assert not any(tmp_path.iterdir()), "a run directory was created"


def test_secret_name_may_take_a_secret_by_interpolation():
    """Under a secret name an interpolated secret is one like any other: a local run passes it on, redacted."""
    proc = moekit(
        "train",
        "experiment=smoke",
        "--dry-run",
        "--format",
        "json",
        "hardware.env.WANDB_API_KEY=${oc.env:HF_TOKEN}",
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr
    _assert_clean(proc.stdout + proc.stderr, "the dry-run output")
    view = json.loads(proc.stdout)
    assert view["env"]["WANDB_API_KEY"] == "<redacted>"
    assert view["config"]["hardware"]["env"]["WANDB_API_KEY"] == "<redacted>"


# ---- a password inside a URL, whatever key holds it ----

URL_PW = "Pl4ntedUrlPw"
URL = f"https://alice:{URL_PW}@data.example.com/train-*.arrayrecord"


@pytest.mark.parametrize(
    "text, shown",
    [
        (URL, "https://alice:<redacted>@data.example.com/train-*.arrayrecord"),
        ("x='s3://k:p%2Fq@b/o' y", "x='s3://k:<redacted>@b/o' y"),
        (
            "postgres://u:pw@db:5432/x and redis://:hunter22@r/0",
            "postgres://u:<redacted>@db:5432/x and redis://:<redacted>@r/0",
        ),
        ("ssh://git@github.com/a/b https://example.com/a:b@c", "ssh://git@github.com/a/b https://example.com/a:b@c"),
        ("user:pass@host (no scheme) and a:b", "user:pass@host (no scheme) and a:b"),
    ],
)
def test_url_passwords_are_redacted_and_nothing_else(text, shown):
    assert redact.redact_urls(text) == shown


def test_url_passwords_are_redacted_in_trees_assignments_scrubbers_and_streams(capsys):
    import sys

    tree = {"data": {"files": URL, "steps": 3}, "env": [f"DB=mysql://root:{URL_PW}@h/db"]}
    assert URL_PW not in json.dumps(redact.redact_tree(tree))
    assert URL_PW in redact.secret_values({}, tree)  # scrubbed from logs even where it appears without its URL
    assert redact.secret_values({"PIP_INDEX_URL": f"https://u:{URL_PW}@pypi.example"}) == {URL_PW}
    assert URL_PW not in " ".join(redact.redact_assignments([f"data.files={URL}"]))
    scrub = redact.Scrubber(set())  # no secret known in advance: a URL password is still scrubbed
    assert scrub and URL_PW not in scrub(f"Config param hf_train_files: {URL}")
    redact.RedactingStream(sys.stdout).write(f"error: cannot open {URL}\n")
    assert URL_PW not in capsys.readouterr().out


def test_run_records_carry_no_url_password(tmp_path):
    from moekit import rundir

    rundir.write_json(tmp_path / "m.json", {"overrides": [f"data.files={URL}"]})
    text = (tmp_path / "m.json").read_text()
    assert URL_PW not in text and "alice:<redacted>@data.example.com" in text


def test_dry_run_and_renders_carry_no_url_password(capsys, tmp_path):
    from moekit import cli

    given = ["data=grain", f"data.files={URL}", f"cluster.env.DB_URL=postgres://bob:{URL_PW}@db/x"]
    assert cli.main(["train", "experiment=smoke", *given, "--dry-run", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert URL_PW not in out.out + out.err and "alice:<redacted>@" in out.out
    for target in ("jobset", "slurm", "compose"):
        assert cli.main(["render", "experiment=smoke", f"target={target}", *given, "-o", str(tmp_path / target)]) == 0
        err = capsys.readouterr().err
        assert "a password in a URL was replaced" in err, target
        text = (tmp_path / target).read_text()
        assert URL_PW not in text and "bob:<redacted>@db" in text, target
