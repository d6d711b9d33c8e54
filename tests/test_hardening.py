"""Each class of bad input, fault or hostile file is refused before launch, or recorded as the failure it is: data
that cannot train, paths that lead out of the tree, environments over the kernel's limits, signals and messages."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import compose
from moekit import rundir
from moekit.base import failures
from moekit.base.errors import ConfigError
from moekit.config import compose as composing
from moekit.config.checks import problems, sizes
from moekit.preflight import data as data_preflight
from moekit.preflight import data_capacity
from moekit.run import preemption
from moekit.rundir import attempts

TEXT = "the cat sat on the mat and the dog sat on the log . "


def write_parquet(path: Path, values: list, column: str = "text") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({column: values}), str(path))


def _hf(tmp_path: Path, *more: str):
    return compose(
        "smoke", ["data=grain", "data.format=parquet", f"data.files={tmp_path}/*.parquet", "data.workers=1", *more]
    )


# ---- 6. training that did not train is not a success ----

# MaxText 0.2.5 common/data_loader.py and trainers/pre_train/train.py: what its log says when the data loader raised.
RAN_OUT = "Training stopped: You may have run out of training data. Received <class 'StopIteration'> exception: ()"
ITER_FAILED = (
    "Training stopped: `next(self.data_iterator)` failed with <class 'TypeError'> exception: "
    "(TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]])."
)


@pytest.mark.parametrize(
    "log, last, recorded, name",
    [
        ([RAN_OUT], 0, True, "data_ended"),
        (["step 0", ITER_FAILED], None, True, "data_error"),
        (["compiling", "done"], 1, True, "unfinished"),  # exit 0 after steps 0-1 of 4, no reason in the log
        (["done"], 3, True, None),  # every step trained
        (["done"], None, False, None),  # a launcher that holds no metrics and no reason: nothing to say
        ([preemption.STOPPED + " (SIGTERM)."], 1, False, None),  # a stop is the preemption's to record
    ],
)
def test_a_run_that_exits_0_before_its_last_step_fails_with_its_class(log, last, recorded, name):
    found = failures.unfinished(iter(log), last, 4, recorded)
    assert (found.name if found else None) == name
    if found:
        assert found.returncode == 0 and "of 4" in found.evidence
        assert found.doc.startswith("docs/troubleshooting.md#")


@pytest.mark.integration  # trains: MaxText runs out of data between moekit's bound and the need
def test_a_run_whose_data_runs_out_fails_with_its_class(tmp_path):
    from conftest import moekit

    write_parquet(tmp_path / "a.parquet", [TEXT * 20] * 4)  # 4 documents: the bound allows 4 + 33, 4 are there
    runs = tmp_path / "runs"
    proc = moekit(
        "train", "experiment=smoke", "data=grain", "data.format=parquet", f"data.files={tmp_path}/*.parquet",
        "train.steps=6", f"run.base_dir={runs}",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "training failed: data ran out (every process exited 0)" in proc.stderr
    assert "docs/troubleshooting.md#data-ran-out" in proc.stderr and "of 6)" in proc.stderr
    manifest = json.loads(next(runs.glob("smoke/*/manifest.json")).read_text())
    assert manifest["status"] == "failed" and manifest["failure"]["class"] == "data_ended"


def test_the_data_classes_are_read_from_a_crashed_log_too():
    assert failures.classify(1, f"x\n{ITER_FAILED}\nTraceback").name == "data_error"


def test_a_text_column_of_numbers_is_refused_before_launch(tmp_path):
    write_parquet(tmp_path / "a.parquet", list(range(40)))
    found = [str(p) for p in data_preflight.problems(_hf(tmp_path))[0]]
    assert any("column 'text' holds int64 values, not text" in p for p in found), found
    json_file = tmp_path / "a.jsonl"
    json_file.write_text("".join(json.dumps({"text": [1, 2]}) + "\n" for _ in range(3)))
    assert data_capacity.column_type(str(json_file), "json", "text") == "list"
    assert data_capacity.column_type(str(tmp_path / "a.parquet"), "parquet", "missing") is None


def test_too_little_data_for_the_steps_is_refused_before_launch(tmp_path):
    # smoke: 2 sequences of 128 tokens a step. 4 documents of 52 bytes give at most 4 + ceil(216 / 128) = 6.
    write_parquet(tmp_path / "a.parquet", [TEXT] * 4)
    found = [p for p in data_preflight.problems(_hf(tmp_path, "train.steps=4"))[0] if p.key == "train.steps"]
    assert found and "cannot fill 4 steps of 2 sequences (8 sequences)" in found[0].what, found
    assert "at most 6 sequences" in found[0].what and "data.epochs=2" in found[0].fix
    assert not [p for p in data_preflight.problems(_hf(tmp_path, "train.steps=3"))[0] if p.key == "train.steps"]
    assert not [
        p for p in data_preflight.problems(_hf(tmp_path, "train.steps=4", "data.epochs=2"))[0] if p.key == "train.steps"
    ]


def test_the_bound_never_refuses_data_that_suffices():
    # one long document packed into many sequences: 10,000 bytes can give up to 1 + ceil(10,002 / 128) sequences
    assert data_capacity.most_sequences(data_capacity.Counted(1, 10_000), 128) == 1 + 79
    assert data_capacity.most_sequences(data_capacity.Counted(10, None), 128) is None  # enough documents: unread


def test_empty_files_name_data_files(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"")
    write_parquet(tmp_path / "b.parquet", [], column="text")  # a schema and no rows
    found = data_preflight.problems(_hf(tmp_path))[0]
    assert [p.key for p in found] == ["data.files", "data.files"], found
    assert "are empty (0 bytes)" in found[0].what and "hold no documents" in found[1].what


# ---- 7. nothing outside the tree is read or written ----


@pytest.mark.parametrize("option", ["../../../etc/passwd", "/etc/hosts", "~/x", "sub/../../../x", "[smoke,../../x]"])
def test_a_group_option_cannot_name_a_file_outside_the_config_tree(option):
    with pytest.raises(ConfigError, match="outside the config tree"):
        composing.compose_raw([f"experiment={option}" if "[" not in option else f"model={option}"])


def test_a_link_in_the_config_tree_that_leads_out_is_refused(tmp_path):
    conf = tmp_path / "conf"
    import shutil

    shutil.copytree(composing.config_dir(), conf)
    outside = tmp_path / "outside.yaml"
    outside.write_text("# @package _global_\ntrain: {steps: 1}\n")
    (conf / "experiment" / "evil.yaml").symlink_to(outside)
    with pytest.raises(ConfigError, match="outside the config tree"):
        composing.compose_raw(["experiment=evil"], conf)


def test_writes_under_a_run_directory_never_follow_a_link(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    (run / attempts.ATTEMPTS).symlink_to(elsewhere)
    (run / "maxtext.log").write_text("attempt 1\n")
    with pytest.raises(rundir.OutsideRunDir, match="is a symbolic link"):
        attempts.set_aside(run)
    assert (run / "maxtext.log").is_file() and not list(elsewhere.iterdir())  # nothing moved


def test_a_plot_replaces_a_link_planted_where_it_goes(tmp_path):
    from moekit.observe.reports import plots

    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / plots.LOSS_PNG
    link.symlink_to(target)
    plt = plots._pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0], label="a run")
    plots._save(plt, fig, [], link)
    assert target.read_text() == "keep me" and not link.is_symlink()
    assert link.read_bytes()[:4] == b"\x89PNG" and stat.S_IMODE(link.stat().st_mode) == 0o666 & ~rundir.umask()


# ---- 9. environment names and sizes ----


@pytest.mark.parametrize("name", ["A.B", "C=D", "E F", "1X"])
def test_environment_names_the_kernel_or_kubernetes_would_mangle_are_refused(name):
    cfg = compose("smoke")
    cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"env": {name: "v", "OK_NAME": "v"}})})
    found = [p for p in problems(cfg) if p.key.startswith("cluster.env")]
    assert len(found) == 1 and "is not an environment variable name" in found[0].what, found


def test_environments_over_the_kernels_limits_are_refused():
    cfg = compose("smoke")
    many = {f"V{i}": "x" * 500 for i in range(4000)}  # 2 MB: over ARG_MAX with anything else
    cfg_many = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"env": many})})
    found = list(sizes.environment_fits_a_launch(cfg_many))
    assert len(found) == 1 and "4,000 variables" in found[0].what
    big = {"ONE": "x" * (sizes.MAX_ARG_STRLEN + 1)}
    cfg_big = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"env": big})})
    assert "at most 131,072 bytes per variable" in list(sizes.environment_fits_a_launch(cfg_big))[0].what
    assert not list(sizes.environment_fits_a_launch(cfg))


def test_a_process_the_kernel_refuses_is_a_recorded_failure_not_a_traceback(tmp_path):
    from moekit.run import launch

    spec = launch.ProcessSpec(
        [sys.executable, "-c", "pass"], {"BIG": "x" * (sizes.MAX_ARG_STRLEN + 10)}, tmp_path / "l"
    )
    with pytest.raises(launch.LaunchError, match="process 0 could not be started: Argument list too long"):
        launch.run([spec])


def test_a_manifest_over_the_clusters_limit_is_refused_and_a_large_env_before_it(capsys):
    from moekit import cli
    from moekit.commands import render
    from moekit.render.targets import TARGETS

    assert "the Kubernetes API server's object limit" in render.too_large(TARGETS["jobset"], "x" * 1_600_000)
    assert render.too_large(TARGETS["jobset"], "x" * 1_500_000) is None
    assert "max_script_size" in render.too_large(TARGETS["slurm"], "x" * (4 * 1024 * 1024 + 1))
    assert render.too_large(TARGETS["compose"], "x" * 10_000_000) is None
    env = [f"cluster.env.V{i}={'x' * 100_000}" for i in range(30)]  # a 3 MB JobSet
    assert cli.main(["render", "experiment=smoke", "target=jobset", *env, "--check"]) == 2
    err = capsys.readouterr().err
    assert "30 variables and raw arguments of 3,000,1" in err and "nothing was launched" in err, err[-600:]
    assert "Traceback" not in err


# ---- 12. signals and messages ----


def test_sighup_is_a_stop_request_like_sigterm():
    with preemption.Notice(saves=True) as notice:
        os.kill(os.getpid(), signal.SIGHUP)
    assert notice.signum == signal.SIGHUP


def test_sighup_stops_a_supervisor_and_its_workers_cleanly(tmp_path):
    """A real process: moekit's Notice around a child; SIGHUP reaches the supervisor, which stops its child."""
    code = (
        "import subprocess, sys, time\n"
        "from moekit.run import preemption\n"
        "with preemption.Notice(saves=False) as n:\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "    print('ready', flush=True)\n"
        "    while n.signum is None: time.sleep(0.05)\n"
        "    child.terminate(); child.wait()\n"
        "print('stopped by', n.signum, flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGHUP)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and f"stopped by {int(signal.SIGHUP)}" in out


def test_the_loser_of_two_jobs_on_one_port_is_a_coordinator_conflict():
    loser = (
        "F1205 08:10:00.1 client.h:86] Terminating process because the JAX distributed service detected fatal "
        "errors. absl::Status: ALREADY_EXISTS: Task /job:jax_worker/replica:0/task:1 already registered with a "
        "newer incarnation\nRPC: /xla.coordination.CoordinationService/RegisterTask\nDEADLINE_EXCEEDED"
    )
    assert failures.classify(-6, loser).name == "coordinator_conflict"


def test_no_inodes_left_names_its_cause_and_a_fix_that_resumes(tmp_path):
    from conftest import mount_tmpfs

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        mount_tmpfs(mnt, "10m,nr_inodes=16")
    except (subprocess.CalledProcessError, OSError, pytest.skip.Exception):
        pytest.skip("cannot mount a tmpfs here")
    try:
        run = mnt / "run"
        run.mkdir()
        (run / rundir.MANIFEST).write_text("{}")
        n = 0
        with pytest.raises(rundir.RecordError) as err:
            with rundir.records_before_launch(run):
                while True:
                    (run / f"f{n}").write_text("")
                    n += 1
        text = str(err.value)
        assert "no inodes left" in text and "GB still free" in text and f"run.dir={run}" in text
        assert "it resumes" in text and "leave run.dir unset" not in text
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_yaml_tags_that_build_values_are_refused_with_file_and_line(tmp_path):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(composing.config_dir(), conf)
    (conf / "experiment" / "tagged.yaml").write_text(
        "# @package _global_\ntrain:\n  steps: 2\nrun:\n  name: !!binary aGVsbG8=\n"
    )
    with pytest.raises(ConfigError) as err:
        composing.compose_raw(["experiment=smoke"], conf)
    assert f"{conf / 'experiment' / 'tagged.yaml'}, line 5: the YAML tag !!binary is not allowed" in str(err.value)
    (conf / "experiment" / "tagged.yaml").write_text("# @package _global_\ntrain:\n  steps: !!int 2\n")
    composing.compose_raw(["experiment=tagged"], conf)  # a tag that only restates a scalar's type is fine


def test_records_get_the_mode_every_other_file_gets(tmp_path):
    rundir.write_json(tmp_path / "m.json", {"a": 1})
    (tmp_path / "plain").write_text("")
    assert stat.S_IMODE((tmp_path / "m.json").stat().st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode)


# ---- 10, 12, 13, 16: report on many steps, non-finite metrics, where reports go, plots ----

RUNS = Path(__file__).parent / "data" / "runs"


def _copy_run(src: str, dst: Path, steps: int | None = None, nan_from: int | None = None) -> Path:
    """A recorded CPU run (tests/data/runs) copied, its last record repeated to `steps` steps, NaN from `nan_from`."""
    import shutil

    shutil.copytree(RUNS / src, dst)
    rows = [json.loads(line) for line in (dst / "metrics.jsonl").read_text().splitlines()]
    steps = steps or len(rows)
    out = []
    for i in range(steps):
        row = dict(rows[min(i, len(rows) - 1)], step=i)
        if nan_from is not None and i >= nan_from:
            row["learning/loss"] = float("nan")
            row["perf/step_time_seconds"] = float("inf") if i == nan_from else float("nan")
        out.append(json.dumps(row) + "\n")
    (dst / "metrics.jsonl").write_text("".join(out))
    cfg = (dst / "config.yaml").read_text()
    (dst / "config.yaml").write_text(cfg.replace("steps: 4\n", f"steps: {steps}\n"))
    return dst


def test_report_time_is_linear_in_metric_lines(tmp_path, capsys):
    import time

    from moekit import cli

    def took(steps: int) -> float:
        run = _copy_run("b2", tmp_path / f"r{steps}", steps)
        start = time.perf_counter()
        assert cli.main(["report", str(run)]) == 0
        return time.perf_counter() - start

    took(4)  # imports and matplotlib's first use
    small, large = took(2_000), took(20_000)
    # A pass over every step per step (what the throughput plot did) took 26 s for 10,000 steps and 279 s for 30,000.
    assert large < 10 * 3 * small, (small, large)


def test_non_finite_metrics_make_a_report_row_not_ok_and_are_never_warm_up(tmp_path):
    from moekit.observe.reports import report as rep
    from moekit.observe.runs import rundata, steady

    run = rundata.load(_copy_run("ckpt", tmp_path / "nan", nan_from=7))
    status = rep.status(run)
    assert status != "ok" and "loss not finite at step(s) 7-9" in status, status
    left_out = run.summary.get("excluded") or {}
    reasons = {int(k): v for k, v in left_out.items()} if isinstance(left_out, dict) else {}
    steps = [steady.Step(int(r["step"]), r["perf/step_time_seconds"], 1) for r in run.metrics.rows]
    verdict = steady.judge(steps, {})
    assert {verdict.left_out[s] for s in (7, 8, 9)} == {steady.NONFINITE}, (verdict.left_out, reasons)


def test_a_report_of_runs_in_different_folders_needs_out(tmp_path, capsys):
    from moekit import cli

    a = _copy_run("b2", tmp_path / "x" / "a")
    b = _copy_run("b4", tmp_path / "y" / "b")
    assert cli.main(["report", str(a), str(b)]) == 2
    assert "lie in different folders" in capsys.readouterr().err and not (tmp_path / "report.md").exists()
    assert cli.main(["report", str(a), str(b), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "report.md").is_file()
    c = _copy_run("b4", tmp_path / "x" / "c")  # side by side in one folder (a sweep's): written there
    assert cli.main(["report", str(a), str(c)]) == 0 and (tmp_path / "x" / "report.md").is_file()


def test_a_fabric_only_run_directory_is_reported(tmp_path, capsys):
    from moekit import cli

    run = _copy_run("b2", tmp_path / "fabric")
    (run / "metrics.jsonl").unlink()
    cfg = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(cfg + "fabric:\n  only: true\n" if "fabric:" not in cfg else cfg.replace(
        "  only: false", "  only: true"))  # fmt: skip
    fabric = {
        "link_names": {"scale_up": "within a node"},
        "results": [
            {"collective": "all_reduce", "size_bytes": 1 << 20, "groups": 1, "group_size": 2, "link_class": "scale_up",
             "time_s": 0.001, "gb_per_s": 1.5, "expected_gb_per_s": None, "ratio": None, "per_rank": []}
        ],
        "problems": [],
    }  # fmt: skip
    (run / "fabric.json").write_text(json.dumps(fabric))
    assert cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    out = capsys.readouterr()
    assert "all_reduce" in out.out and "maxtext.log" not in out.out + out.err
    assert "fabric-only run" in (run / "report.md").read_text()


def test_plots_keep_long_labels_and_legends_off_the_data(tmp_path):
    from moekit.observe.reports import plots
    from moekit.observe.runs import rundata

    long = "experiment=smoke moe=ragged_dot precision=bf16 train.per_device_batch_size=4 xla=blog"
    runs = [rundata.load(_copy_run(n, tmp_path / n)) for n in ("b2", "b4")]
    plots.write(runs, [long, long + " memory=remat_full"], tmp_path / "out")
    assert plots._wrapped(long).count("\n") >= 3 and max(map(len, plots._wrapped(long).split("\n"))) <= 24
    plt = plots._pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(range(10), range(10), label=long)
    plots._legend_outside(ax)
    fig.tight_layout()
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # right of the axes: it covers no point


# ---- 14. data prepare's parquet shards and data=hf agree on one vocabulary fix ----


def test_parquet_shards_pass_data_hf_with_the_fix_every_place_prints(tmp_path, capsys):
    import re

    from moekit import cli
    from moekit.config.compose import config_dir

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text(TEXT * 200 + "\n")
    assert cli.main(["data", "prepare", str(src), "--out", str(tmp_path / "pq"), "--format", "parquet"]) == 0
    capsys.readouterr()
    run_line = (config_dir() / "data" / "hf.yaml").read_text().splitlines()[0]
    documented = re.search(r"model\.extra\.vocab_size=(\d+)", run_line)[1]
    files = f"data.files={tmp_path}/pq/*.parquet"
    refused = [p for p in data_preflight.problems(compose("smoke", ["data=hf", files]))[0]]
    assert [p.key for p in refused] == ["data.tokenizer"]
    assert f"model.extra.vocab_size={documented} " in refused[0].fix, (refused[0].fix, documented)
    fixed = compose("smoke", ["data=hf", files, f"model.extra.vocab_size={documented}", "train.steps=1"])
    assert data_preflight.problems(fixed)[0] == []
    assert cli.main(["config", "groups"]) == 0
    assert f"model.extra.vocab_size={documented}" in capsys.readouterr().out


# ---- 15. moekit fabric is judged as the check it is, not as training ----


def test_a_fabric_only_job_is_not_refused_for_training_reasons_and_shows_no_maxtext_command(capsys):
    from moekit import cli

    ep = ["experiment=smoke", "cluster.processes_per_node=2", "parallelism.ici.expert=2"]
    trained = [p.key for p in problems(compose(None, ep))]
    assert "moe.dispatch" in trained  # training on this mesh needs the ring dispatch on CPU
    assert problems(compose(None, [*ep, "fabric.only=true"])) == []
    assert cli.main(["fabric", *ep, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "no MaxText command runs" in out and "maxtext.trainers" not in out and "# MaxText command" not in out
    assert problems(compose(None, [*ep[:2], "parallelism.ici.expert=3", "fabric.only=true"]))  # the mesh still counts


# ---- 16. the first hour: help texts, docs, notices ----


def test_make_help_lists_every_documented_target():
    import re

    repo = Path(__file__).resolve().parents[1]
    documented = re.findall(r"^([^\s:#=]+):[^=\n]*##", (repo / "Makefile").read_text(), re.M)
    shown = subprocess.run(["make", "-s", "help"], cwd=repo, capture_output=True, text=True, check=True).stdout
    listed = [line.split()[0] for line in shown.splitlines() if line.strip()]
    assert "k8s" in documented and listed == documented, (documented, listed)


def test_tokenizer_import_prints_no_transformers_notice():
    code = "from moekit.base import maxtext_files; maxtext_files.tokenizer_module()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={
        k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "PyTorch was not found" not in proc.stderr + proc.stdout


def test_an_unknown_option_suggests_what_the_config_chose_not_the_first_name(capsys):
    from moekit import cli

    assert cli.main(["config", "show", "experiment=smoke", "moe=fast"]) == 2
    err = capsys.readouterr().err
    assert "fix: moe=ragged_dot (what the config chooses without it" in err and "moe=dense" not in err.split("fix:")[1]
