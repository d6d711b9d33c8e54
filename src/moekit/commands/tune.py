"""`moekit tune`: a sweep of real `moekit train` runs; the fastest correct one becomes a named preset.

    moekit tune experiment=dsv3_proxy_h200 --axis train.per_device_batch_size=6,8 --candidate "xla=blog" \
        --name dsv3_proxy_h200_tuned --out sweeps/h200 [--write-preset]

Each sweep gets a new folder, <--out>/<name>/<timestamp>, with one run directory per trial and tune.json.

Candidates are the Cartesian product of the --axis options plus each --candidate, every one on top of the
positional overrides (the base, which always runs too). A run that goes out of memory, fails or times out
is discarded; so is one whose loss trajectory leaves the reference's (the base plus --reference, trained
on the same tokens per step) by more than moekit.observe.reports.compare.TUNE. The two fastest remaining ones run
again (series/repeats.py: the noise this host measured for each); the one with the higher mean tokens/s per device
is written as conf/experiment/<name>.yaml with its measured numbers and their provenance, and the verdict says
whether it is faster than the runner-up beyond that noise, or within it.
"""

from __future__ import annotations

import argparse
import json
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from moekit import rundir
from moekit.base.errors import ConfigError, MoekitError
from moekit.config import formats
from moekit.config.compose import config_dir
from moekit.config.load import load
from moekit.config.schema import Config
from moekit.observe.reports import comparable, compare
from moekit.series import host_fit, repeats, trial, tune_table, tuning
from moekit.series.preset import preset_yaml

HELP = "sweep configurations through moekit train, discard OOM/diverging ones, write the fastest as a preset"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The base overrides, the candidates (--axis, --candidate), the loss reference, and where and how long to run."""
    p.add_argument("overrides", nargs="*", help="the base: experiment=... and other Hydra overrides")
    p.add_argument("--axis", action="append", default=[], metavar="KEY=V1,V2", help="sweep axis (repeatable)")
    p.add_argument("--candidate", action="append", default=[], metavar="'K=V K=V'", help="one extra candidate")
    p.add_argument(
        "--reference",
        default="",
        metavar="'K=V ...'",
        help="overrides that make the loss reference "
        "from the base (default: the base itself, e.g. 'moe=dense' for the masked dense path)",
    )
    p.add_argument("--name", help="preset name to write (default: <experiment>_tuned)")
    p.add_argument(
        "--out", type=Path, default=Path("outputs/tune"), help="parent of this sweep's new folder <name>/<timestamp>"
    )
    p.add_argument("--timeout-s", type=float, default=600, help="per run (compilation included)")
    p.add_argument("--write-preset", action="store_true", help="also write conf/experiment/<name>.yaml")


def _plan(args: argparse.Namespace) -> tuple[list[tuple[list[str], Config, bool]], dict[tuple, list[str]]]:
    """Candidates (overrides, resolved config) and one reference per tokens-per-step, each composed and checked once."""
    try:
        extra = tuning.expand(args.axis) + [tuning.parse_candidate(c) for c in args.candidate]
        reference = tuning.parse_candidate(args.reference) if args.reference else []
    except ValueError as exc:
        raise MoekitError(f"{exc}\n  fix: --axis KEY=V1,V2 and --candidate 'KEY=VALUE KEY=VALUE'") from None
    candidates, seen = [], []
    references: dict[tuple, list[str]] = {}
    ref_configs: dict[tuple, Config] = {}
    bad = []
    for c in [[], *extra]:  # compose and check everything before the first run; run each config once
        ov = args.overrides + c
        try:
            cfg = load(ov, warn=False)
        except ConfigError as exc:
            bad.append(f"  {tuning.label(ov)}:\n    {str(exc).replace(chr(10), chr(10) + '    ')}")
            continue
        if tuning.training(cfg) in seen:  # the same training step (config/training_step.py): one candidate, run once
            continue
        seen.append(tuning.training(cfg))
        candidates.append((ov, cfg))
        batch = tuning.batch_key(cfg)
        ref = [*args.overrides, *reference, f"train.per_device_batch_size={batch[0]:g}", f"train.seq_len={batch[1]}"]
        references.setdefault(batch, ref)
    for batch, ref in references.items():
        try:
            ref_configs[batch] = load(ref, warn=False)
        except ConfigError as exc:
            bad.append(f"  reference {tuning.label(ref)}:\n    {exc}")
    for ov, cfg in candidates:  # each against the reference it is judged by (observe.reports.comparable's rule)
        ref_cfg = ref_configs.get(tuning.batch_key(cfg))
        why = ref_cfg and comparable.differs(tuning.setup(ref_cfg), tuning.setup(cfg))
        if why == "another model":  # a smaller model would always "win"
            changed = sorted(
                k for k in type(cfg.model).model_fields if getattr(cfg.model, k) != getattr(ref_cfg.model, k)
            )
            bad.append(
                f"  {tuning.label(ov)}: changes the model ({', '.join(f'model.{k}' for k in changed)}); tune ranks "
                "configurations of one model by tokens/s, another model's throughput is not comparable"
            )
        elif why:
            bad.append(f"  {tuning.label(ov)}: {why} than its reference; tune compares runs of one setup")
    if bad:
        raise ConfigError("these sweep configurations are invalid; nothing was launched:\n" + "\n".join(bad))
    same = [tuning.training(cfg) == tuning.training(ref_configs[tuning.batch_key(cfg)]) for _, cfg in candidates]
    return [(ov, cfg, s) for (ov, cfg), s in zip(candidates, same, strict=True)], references


def run(args: argparse.Namespace) -> int:
    """Run references then candidates, judge each candidate's losses against its batch's reference, and write the
    fastest accepted one as a preset; returns 1 when none is accepted, else 0."""
    experiment = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("experiment=")), None)
    name = args.name or f"{experiment or 'default'}_tuned"
    if why := formats.EXPERIMENT_NAME.problem(name):  # it names conf/experiment/<name>.yaml and its experiment_name
        raise ConfigError(f"--name {name!r} {why}.\n  fix: --name {experiment or 'default'}_tuned")
    candidates, references = _plan(args)
    host_fit.runs_here(args.overrides, candidates[0][1])  # the base is the first candidate, checked
    target = config_dir() / "experiment" / f"{name}.yaml"
    if args.write_preset and target.exists():
        raise ConfigError(
            f"--write-preset: {target} exists, and a tune never replaces an experiment file (its numbers were "
            f"measured).\n  fix: --name {name}_2 (a new preset), or leave out --write-preset (the preset is then "
            "written into the sweep's folder only)"
        )
    out = rundir.new_run_dir(rundir.absolute(args.out, Path.cwd()), name, datetime.now(UTC))  # never a previous one
    print(f"moekit tune: {len(references)} reference(s) and {len(candidates)} candidate(s); runs in {out}", flush=True)
    runs: list[dict[str, Any]] = []
    record = {
        "base": args.overrides,
        "name": name,
        "started": datetime.now(UTC).isoformat(),
        "rtol": tuning.RTOL,
        "atol": tuning.ATOL,
        "runs": runs,
    }

    def save() -> None:
        (out / "tune.json").write_text(json.dumps(record, indent=2) + "\n")

    # References first, so every candidate can be judged as soon as it finishes.
    ref_results: dict[tuple, dict[str, Any]] = {}
    for i, (batch, ref) in enumerate(references.items()):
        print(f"moekit tune: reference {i + 1}/{len(references)}: {tuning.label(ref)}", flush=True)
        r = trial.run(ref, out / f"ref{i}", args.timeout_s) | {"role": "reference", "batch": list(batch)}
        r["accepted"] = r["status"] == "ok"
        ref_results[batch] = r
        runs.append(r)
        save()
    for i, (ov, cfg, same_as_reference) in enumerate(candidates):
        batch = tuning.batch_key(cfg)
        ref = ref_results[batch]
        if same_as_reference:
            r = dict(ref) | {"role": tune_table.SAME, "overrides": ov}
        else:
            print(f"moekit tune: candidate {i + 1}/{len(candidates)}: {tuning.label(ov)}", flush=True)
            r = trial.run(ov, out / f"c{i}", args.timeout_s) | {"role": "candidate", "batch": list(batch)}
            r["accepted"] = False
            if r["status"] == "ok":
                if ref["status"] != "ok":
                    r["check"] = f"unchecked: the reference at this batch ended {ref['status']}"
                else:
                    ok, diff, bad = compare.compare_losses(ref.get("losses", []), r.get("losses", []))
                    r["check"] = f"loss max diff {diff:.2e}" + ("" if ok else f", beyond tolerance at step {bad}")
                    r["accepted"] = ok
                r["vs_reference"] = tuning.versus(cfg, ref, r).text()
        runs.append(r)
        save()
    best, settled = repeats.settle(runs, out, args.timeout_s, tuning.setup(candidates[0][1]), save)  # the noise
    print(tune_table.format_table(runs))
    print(tune_table.format_failures(runs))
    if best is None:
        unranked = [r for r in runs if r["role"].startswith("candidate") and r.get("accepted")]
        why = (
            "the accepted candidates have too few steady steps for a number (docs/metrics.md): train more steps"
            if unranked
            else "no candidate finished within tolerance"
        )
        print(f"moekit tune: {why}; no preset written ({out / 'tune.json'})")
        return 1
    record["winner"], record["winner_against_noise"] = best["overrides"], settled
    save()
    text = preset_yaml(name, best)
    preset = out / f"{name}.yaml"
    preset.write_text(text)
    print(
        f"moekit tune: fastest: {tuning.label(best['overrides'])} ({settled}; against its reference: "
        f"{best.get('vs_reference', 'n/a (it is the reference)')}); preset in {preset}"
    )
    if args.write_preset:
        rundir.write_atomic(target, text)
        print(f"moekit tune: wrote {target}; run it with:\n  moekit train experiment={name}")
    else:
        print(
            f"moekit tune: to run it, add it to the experiments (or tune again with --write-preset):\n"
            f"  {shlex.join(['cp', str(preset), str(target)])}\n  moekit train experiment={name}"
        )
    return 0
