"""Hostile or damaged inputs end in a message before any work, never in the host's memory, a hang or a traceback:
report's records, render's CRD and checks, data prepare's text and tokenizer, a config's defaults list, a closed
standard output, and the first commands of a recipe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, moekit
from moekit import cli
from moekit.observe.runs import metrics
from moekit.prepare import text_shards
from moekit.render import validate
from moekit.rundir import attempts

RUN = REPO / "tests" / "data" / "runs" / "b2"  # a real 4-step smoke run's records


def _run_copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    return run


def _report(run: Path, capsys) -> tuple[int, str]:
    start = time.monotonic()
    rc = cli.main(["report", str(run), "--out", str(run.parent / "out")])
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert took < 60, took  # a refusal comes before anything is sized by the bad value
    return rc, err


def _rewrite_metrics(run: Path, step: object) -> None:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1]) | {"step": step}
    (run / "metrics.jsonl").write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")


@pytest.mark.parametrize("step", [3.5e9, 2**40, 4, -1, 2.5])
def test_report_checks_each_step_number_against_the_config_before_sizing_anything(tmp_path, capsys, step):
    run = _run_copy(tmp_path)  # train.steps: 4, so steps 0..3
    _rewrite_metrics(run, step)
    rc, err = _report(run, capsys)
    assert rc == 2 and "Traceback" not in err, err
    assert "metrics.jsonl:4 is not a MaxText metrics record" in err, err


def test_report_refuses_a_config_count_no_run_has(tmp_path, capsys):
    run = _run_copy(tmp_path)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["train"]["steps"] = 7 * 10**9
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    rc, err = _report(run, capsys)
    assert rc == 2 and "train.steps is 7,000,000,000, more than the 10,000,000 a report reads" in err, err


def test_every_record_report_reads_has_a_size_bound(tmp_path, capsys):
    from moekit.base import bounded

    for name, size in (("metrics.jsonl", metrics.MAX_BYTES + 1), ("manifest.json", 64 * bounded.MiB + 1)):
        run = _run_copy(tmp_path / name)
        with open(run / name, "r+b") as fh:  # sparse: costs no disk
            fh.truncate(size)
        rc, err = _report(run, capsys)
        assert rc == 2 and "holds more than" in err and "Traceback" not in err, (name, err)


def test_an_events_file_that_is_a_device_is_refused(tmp_path, capsys):
    run = _run_copy(tmp_path)
    (run / "events.jsonl").symlink_to("/dev/zero")
    rc, err = _report(run, capsys)
    assert rc == 2 and "is not a regular file" in err, err


def test_missing_steps_are_counted_from_the_gaps_not_a_range_of_step_numbers():
    from moekit.observe.runs import summary

    m = metrics.Metrics([{"step": s, "learning/loss": 1.0} for s in (1, 2, 5, 9)])
    s = summary.summarize(m, {}, planned_steps=12)
    assert s["missing_steps"] == [0, 3, 4, 6, 7, 8] and s["steps_not_run"] == [10, 11]


def test_an_mfu_over_100_percent_is_flagged_in_the_table_and_explained(tmp_path, capsys):
    run = tmp_path / "run"  # 10 steps: steady steps remain after the compile and its refill (4 would leave one)
    shutil.copytree(REPO / "tests" / "data" / "runs" / "twoproc", run)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["hardware"]["peak_tflops"]["bf16"] = 0.001  # the run did about 0.006 TFLOP/s
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    text = (run / "report.md").read_text()
    assert "(over 100%: not possible, see notes)" in text and "MFU bf16 is over 100% (or not above 0)" in text
    cfg["hardware"]["peak_tflops"]["bf16"] = -989.0  # a recorded peak below 0: a negative MFU
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    assert "% of -989 (not possible, see notes)" in (run / "report.md").read_text()


def test_a_run_still_compiling_is_not_one_that_wrote_no_step(tmp_path, capsys):
    run = _run_copy(tmp_path)
    (run / "metrics.jsonl").unlink()
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({"status": "running", **{k: manifest[k] for k in ("overrides",)}}))
    with attempts.locked(run):  # a `moekit train` holds it
        rc, err = _report(run, capsys)
    assert rc == 2 and "is still running and has not finished its first step yet" in err, err
    assert "wrote no step" not in err
    rc, err = _report(run, capsys)  # nobody holds it: killed before its first step
    assert rc == 2 and "wrote no step" in err, err


def test_render_check_reads_a_bounded_crd(tmp_path):
    sparse = tmp_path / "crd.yaml"
    with open(sparse, "wb") as fh:
        fh.truncate(validate.CRD_MAX_BYTES + 10)
    for crd in ("/dev/zero", str(sparse)):
        start = time.monotonic()
        proc = moekit("render", "experiment=smoke", "target=jobset", "--check", "--crd", crd, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "not a regular file" in proc.stderr or "holds more than" in proc.stderr, proc.stderr
        assert time.monotonic() - start < 60


def test_render_check_refuses_what_the_api_server_refuses():
    manifest = {
        "metadata": {"name": "big"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "template": {
                        "spec": {
                            "completionMode": "Indexed",
                            "completions": 250_000,
                            "parallelism": 250_000,
                            "template": {
                                "spec": {
                                    "containers": [
                                        {"name": "w", "volumeMounts": [{"name": "d", "subPath": "a/../../b"}]}
                                    ],
                                    "volumes": [{"name": "d", "hostPath": {"path": "/mnt/data/../../etc"}}],
                                }
                            },
                        }
                    },
                }
            ]
        },
    }
    found = "\n".join(validate.webhook_problems(manifest))
    assert "completions 250,000 is more than the 100,000" in found and "parallelism 250,000" in found, found
    assert "hostPath '/mnt/data/../../etc' holds '..'" in found and "subPath 'a/../../b'" in found, found


def test_render_check_cli_names_a_hostpath_with_backsteps():
    proc = moekit(
        "render", "experiment=smoke", "target=jobset", "--check", "cluster.nodes=1",
        "cluster.volumes=[{name: data, path: /data, host_path: /srv/x/../../etc}]", timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0 and "holds '..'" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_data_prepare_refuses_text_made_of_control_bytes(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.txt").write_text("plain text\twith a tab and an \x1b[1mescape\x1b[0m\n" * 20)
    (src / "ctl.txt").write_bytes(bytes(range(1, 9)) * 40 + b"some words\n")
    with pytest.raises(text_shards.PrepareError, match=r"ctl.txt is binary, not text \(320 of its 331 bytes"):
        text_shards.prepare(text_shards.source_files(src), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (src / "ctl.txt").write_text("\x85\x9b\x90" * 50 + "a few words\n")  # C1 controls: valid UTF-8, not text
    with pytest.raises(text_shards.PrepareError, match=r"ctl.txt is binary, not text \(150 of its 312 bytes"):
        text_shards.prepare(text_shards.source_files(src), tmp_path / "out")
    (src / "ctl.txt").unlink()
    assert text_shards.prepare(text_shards.source_files(src), tmp_path / "out").tokens > 0


def test_data_prepare_refuses_a_tokenizer_folder_without_tokenizer_files(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("words to count\n" * 10)
    empty = tmp_path / "tok"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    rc = cli.main(["data", "prepare", str(src), "--out", str(tmp_path / "out"), "--tokenizer", str(empty),
                   "--tokenizer-type", "huggingface"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "holds no tokenizer file" in err and not (tmp_path / "out").exists(), err


def test_a_defaults_list_may_not_reach_outside_the_config_tree(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (tmp_path / "evil.yaml").write_text("train: {steps: 3}\n")
    (conf / "experiment" / "escape.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /model: ../../evil\nexperiment_name: escape\n"
    )
    proc = moekit("config", "show", "experiment=escape", env={"MOEKIT_CONF_DIR": str(conf)}, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "its defaults list names `override /model: ../../evil`, a file outside the config tree" in proc.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["plan", "experiment=smoke"],
        ["render", "experiment=smoke", "target=slurm"],
        ["config", "groups"],
        ["report", "/nonexistent/run"],
    ],
)
def test_a_closed_standard_output_or_error_ends_without_a_traceback(command):
    for redirect in (">&-", "2>&- >&-"):
        line = " ".join([sys.executable, "-m", "moekit", *command]) + " " + redirect
        proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=300, cwd=REPO)
        assert "Traceback" not in proc.stderr and proc.returncode in (0, 2), (line, proc.returncode, proc.stderr)
        assert proc.returncode == (2 if command[0] == "report" else 0), (line, proc.stderr)


@pytest.mark.integration
def test_a_real_train_with_a_closed_stdout_records_its_end(tmp_path):
    run = tmp_path / "run"
    line = f"{sys.executable} -m moekit train experiment=smoke train.steps=3 run.dir={run} >&-"
    proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert json.loads((run / "manifest.json").read_text())["status"] == "ok"


def test_a_one_node_cluster_job_dry_runs_outside_its_cluster():
    env = {k: "" for k in ("MOEKIT_COORDINATOR_HOST", "SLURM_JOB_ID", "SLURM_JOB_NODELIST")}
    for experiment, extra in (("dsv2_lite_8gpu", []), ("smoke", ["cluster=slurm", "cluster.nodes=1"])):
        proc = moekit("train", f"experiment={experiment}", *extra, "--dry-run", env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "MOEKIT_COORDINATOR_HOST is not set" not in proc.stderr


def test_the_recipes_docker_line_runs_a_one_node_cluster_job_on_the_node_itself():
    text = (REPO / "docs" / "recipes" / "dsv2_lite_8gpu.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("docker run "))
    assert line.endswith("train experiment=dsv2_lite_8gpu cluster=local"), line
    cmd = line.split(" moekit ", 1)[1].split()
    proc = moekit(*cmd, "--dry-run", timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_benchmark_scripts_rerun_themselves_with_the_venv_python(tmp_path):
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None or Path(system).resolve() == Path(sys.executable).resolve():
        pytest.skip("no system Python apart from the venv's")
    probe = subprocess.run([system, "-c", "import hydra"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("the system Python has moekit's stack")
    proc = subprocess.run(
        [system, "benchmarks/run_portability.py", "--help"], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0 and "--dry-run" in proc.stdout, proc.stderr
    assert "running with" in proc.stderr and str(REPO / ".venv" / "bin" / "python") in proc.stderr


def test_tune_table_shows_a_reference_once_when_a_candidate_is_it():
    from moekit.series import tune_table

    ref = {"role": "reference", "overrides": ["experiment=smoke", "train.per_device_batch_size=3"], "status": "ok",
           "batch": [3, 64], "accepted": True, "step_time_s": 0.2}  # fmt: skip
    other = {"role": "candidate", "overrides": ["experiment=smoke", "moe=dense"], "status": "ok", "batch": [3, 64]}
    same = dict(ref) | {"role": tune_table.SAME, "overrides": ["experiment=smoke"]}
    rows = tune_table.format_table([ref, same, other]).splitlines()[2:]
    assert len(rows) == 2 and rows[0].startswith("| reference (and candidate) |"), rows
    assert rows[1].startswith("| candidate |")


def test_bench_dispatch_gives_a_verdict_on_the_combines():
    from moekit.bench import dispatch

    result = dispatch.run(dispatch.Layer(tokens=48, hidden=16, experts=3, topk=2, ffn=8), "ragged_dot", iters=2)
    assert result["combines_agree"] is True and result["combines_tolerance"] > 0
    assert "combines agree: max abs difference" in dispatch.format_table(result)
    broken = result | {"combines_agree_max_abs": 3.0, "combines_agree": False}
    assert "combines DIFFER" in dispatch.format_table(broken)


def test_metrics_doc_lists_the_report_sections_in_the_report_order(tmp_path, capsys):
    text = (REPO / "docs" / "metrics.md").read_text()
    section = text[text.index("## The report") : text.index("## Comparing runs")]
    documented = [ln.split("**")[1] for ln in section.splitlines() if ln.startswith("- **")]
    runs = [str(REPO / "tests" / "data" / "runs" / n) for n in ("b2", "b4")]
    assert cli.main(["report", *runs, "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    headings = [ln[3:] for ln in (tmp_path / "report.md").read_text().splitlines() if ln.startswith("## ")]
    at = [next((i for i, d in enumerate(documented) if h.startswith(d)), None) for h in headings]
    assert None not in at and at == sorted(at) and len(at) >= 5, (headings, documented)


def test_a_config_tree_file_that_is_a_pipe_or_huge_is_refused_not_read(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    os.mkfifo(conf / "model" / "piped.yaml")  # Hydra would wait on it for ever
    proc = moekit("config", "show", "experiment=smoke", env={"MOEKIT_CONF_DIR": str(conf)}, timeout=120)
    assert proc.returncode == 2 and "piped.yaml is not a regular file" in proc.stderr, proc.stderr
    (conf / "model" / "piped.yaml").unlink()
    with open(conf / "model" / "huge.yaml", "wb") as fh:
        fh.truncate(64 * 1024 * 1024)
    proc = moekit("config", "show", "experiment=smoke", env={"MOEKIT_CONF_DIR": str(conf)}, timeout=120)
    assert proc.returncode == 2 and "huge.yaml holds more than" in proc.stderr, proc.stderr


def test_prepared_data_in_the_repository_stays_out_of_git():
    proc = subprocess.run(["git", "check-ignore", "-q", "data/texts/corpus.json"], cwd=REPO)
    assert proc.returncode == 0  # `data prepare ~/texts --out data/texts`, as the README gives it


def test_console_lines_share_one_clock():
    import io

    from moekit.observe.runs import progress

    ticks = iter([100.0, 112.5, 130.0])
    stream = io.StringIO()
    phases = progress.Phases(stream, clock=lambda: next(ticks))
    phases("launching")  # +12.5 s
    line = progress.format_progress(progress.StepLine(0, 1.0, 2.0), 3, phases.elapsed())  # the same origin
    assert "(+12.5 s) launching" in stream.getvalue() and line.endswith("(30 s elapsed)"), (stream.getvalue(), line)
    source = (REPO / "src" / "moekit" / "run" / "follow.py").read_text()
    assert "format_progress(s, steps, phase.elapsed(), pace)" in source  # step lines count from the command's start


def test_data_prepare_reads_a_bounded_text_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("some words\n")
    with open(src / "huge.txt", "wb") as fh:  # sparse: costs no disk
        fh.truncate(text_shards.TEXT_MAX_BYTES + 1)
    with pytest.raises(text_shards.PrepareError, match="huge.txt holds more than .*split it into files"):
        text_shards.prepare(text_shards.source_files(src), tmp_path / "out")
