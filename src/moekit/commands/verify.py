"""`moekit verify`: train a reference and candidates with the same seed and data; compare their trajectories.

A candidate that only changes how the math is computed (moe=dense vs the grouped GEMM) must match the
reference step by step; one that changes the math (a learning rate) must not. Runs use precision=fp32
unless told otherwise: in bf16 the reduction order alone moves CPU losses by about 1e-3 between layouts.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

from moekit import rundir
from moekit.base import quantities, redact
from moekit.base.errors import MoekitError
from moekit.config.checks import format_warnings, warnings
from moekit.config.load import load
from moekit.config.schema import Config
from moekit.observe.reports import comparable, compare
from moekit.observe.runs import metrics, rundata
from moekit.run import execute
from moekit.rundir import records

HELP = "numerical equivalence gate: reference vs candidate overrides, same seed and data, N steps"
DEFAULT_STEPS = 6
RESULT = "verify.json"


class VerifyError(MoekitError):
    """The verify request itself is inconsistent."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The reference overrides, the candidates, steps, tolerances, a reused reference and --out."""
    p.add_argument("overrides", nargs="*", help="the reference: Hydra overrides (experiment=smoke ...)")
    p.add_argument(
        "--candidate",
        action="append",
        required=True,
        metavar="OVERRIDES",
        help="a candidate: overrides applied on top of the reference, space-separated ('moe=dense'); repeatable",
    )
    p.add_argument("--steps", type=int, help=f"steps per run (default {DEFAULT_STEPS})")
    p.add_argument("--rtol", type=float, default=compare.RTOL, help=f"relative tolerance (default {compare.RTOL:g})")
    p.add_argument("--atol", type=float, default=compare.ATOL, help=f"absolute tolerance (default {compare.ATOL:g})")
    p.add_argument("--reference", type=Path, metavar="RUN_DIR", help="reuse a finished run as the reference")
    p.add_argument("--out", type=Path, help="folder for the runs and verify.json (default: <run.base_dir>/verify/…)")


def reference_overrides(overrides: list[str], steps: int | None) -> list[str]:
    """fp32 and a fixed step count, unless the overrides choose them."""
    out = list(overrides)
    if not any(o.startswith("precision=") for o in out):
        out.insert(0, "precision=fp32")
    if steps is not None:
        if any(o.startswith("train.steps=") for o in out):
            raise VerifyError("both --steps and train.steps= are given; keep one.")
        out.append(f"train.steps={steps}")
    elif not any(o.startswith("train.steps=") for o in out):
        out.append(f"train.steps={DEFAULT_STEPS}")
    return out


def finished_reference(path: Path) -> rundata.Run:
    """The run at `path`, refused unless it finished (status ok) every step its config asked for: a candidate is
    only ever compared with a whole reference, and nothing trains before that is known."""
    fix = "  fix: give a run that finished (`moekit report RUN_DIR` shows its status), or drop --reference to train one"
    try:
        run = rundata.load(path)
    except MoekitError as exc:
        raise VerifyError(f"--reference {path}: {exc}\n{fix}") from None
    status = run.manifest.status or "without a recorded status"
    if status != records.OK:
        raise VerifyError(f"--reference {path}: the run is {status}, not finished; nothing was launched.\n{fix}")
    steps = (run.config.get("train") or {}).get("steps")
    done = len({r.get("step") for r in run.metrics.rows})
    if isinstance(steps, int) and done < steps:
        raise VerifyError(
            f"--reference {path}: its metrics hold {done} of train.steps={steps} steps; nothing was launched.\n{fix}"
        )
    return run


def plan(args: argparse.Namespace) -> tuple[list[str], Config, list[tuple[list[str], Config]]]:
    """The reference's overrides and config, and each candidate's, all composed and checked before anything trains."""
    for flag, name in (("--rtol", "rtol"), ("--atol", "atol")):
        quantities.check(name, getattr(args, name), flag, f"{flag} {getattr(compare, name.upper()):g} (the default)")
    if args.reference is not None:
        if args.overrides or args.steps is not None:
            raise VerifyError("--reference RUN_DIR brings its own overrides and steps; drop the others.")
        base = finished_reference(args.reference).overrides
    else:
        base = reference_overrides(args.overrides, args.steps)
    candidates = [shlex.split(c) for c in args.candidate]
    if any(not c for c in candidates):
        raise VerifyError("an empty --candidate; give overrides such as --candidate moe=dense")
    ref_cfg = load(base, warn=False)  # warnings print when each run starts
    planned = []
    for cand in candidates:
        cfg = load(base + cand, warn=False)
        why = comparable.differs(_setup(ref_cfg), _setup(cfg))
        if why == "another model":
            changed = sorted(k for k, v in cfg.model.model_dump().items() if v != ref_cfg.model.model_dump().get(k))
            raise VerifyError(
                f"candidate {' '.join(cand)} changes the model ({', '.join(f'model.{k}' for k in changed)}); another "
                "model's losses are not comparable. An equivalence check keeps the model fixed."
            )
        # only what differs is named (a candidate with the reference's steps is not told about its steps)
        changed = [why] if why else []
        if cfg.train.steps != ref_cfg.train.steps:
            changed.append(f"{cfg.train.steps} steps vs the reference's {ref_cfg.train.steps}")
        if changed:
            raise VerifyError(
                f"candidate {' '.join(cand)} changes the setup or the steps ({'; '.join(changed)}); an equivalence "
                "check keeps both fixed."
            )
        planned.append((cand, cfg))
    return base, ref_cfg, planned


def _setup(cfg: Config) -> comparable.Setup:
    return comparable.Setup.of(cfg.model_dump(), cfg.num_devices)


def _speed(ref_dir: Path, where: Path) -> str:
    """The candidate's speed against the reference (observe.reports.comparable), or why there is none."""
    try:
        return comparable.runs(rundata.load(ref_dir), rundata.load(where)).text()
    except MoekitError as exc:
        return f"n/a ({exc})"


def _train(cfg: Config, overrides: list[str], where: Path) -> Path:
    if found := warnings(cfg):
        print(format_warnings(found), file=sys.stderr)
    rc = execute.train(execute.placed(cfg, where), [*overrides, f"run.dir={where}"]).returncode
    if rc != 0 or not (where / rundir.METRICS).is_file():
        raise MoekitError(f"the run in {where} failed (exit {rc}); see its maxtext.log.")
    return where


def run(args: argparse.Namespace) -> int:
    """Train the reference and each candidate, compare their metrics step by step and write verify.json; returns 1
    when any candidate is not equivalent (or did not train), else 0."""
    base, ref_cfg, candidates = plan(args)
    if args.out is not None:
        out = args.out
        if out.is_dir() and any(out.iterdir()):
            raise VerifyError(f"--out {out} is not empty; give a new folder (runs are never overwritten).")
        out.mkdir(parents=True, exist_ok=True)
    else:
        out = rundir.new_run_dir(Path(ref_cfg.run.base_dir), "verify", datetime.now(UTC))
    ref_dir = args.reference or _train(ref_cfg, base, out / "reference")
    reference = metrics.read(ref_dir / rundir.METRICS)

    results = []
    for i, (cand, cand_cfg) in enumerate(candidates, start=1):
        where = out / f"candidate-{i}"
        try:
            verdict = compare.compare(
                reference, metrics.read(_train(cand_cfg, base + cand, where) / rundir.METRICS), args.rtol, args.atol
            )
            text, ok = compare.describe(verdict, args.rtol, args.atol), verdict.ok
            speed = _speed(ref_dir, where)
        except MoekitError as exc:
            text, ok, verdict, speed = f"did not train: {exc}", False, None, "n/a (did not train)"
        results.append(
            {
                "candidate": redact.redact_assignments(cand),
                "run_dir": str(where),
                "ok": ok,
                "result": text,
                "speed_vs_reference": speed,
                "first_diverging_step": None if verdict is None or verdict.ok else verdict.first.step,
            }
        )

    rundir.write_json(
        out / RESULT,
        {
            "reference": {"overrides": redact.redact_assignments(base), "run_dir": str(ref_dir)},
            "rtol": args.rtol,
            "atol": args.atol,
            "candidates": results,
        },
    )
    print(f"\nmoekit verify: reference {' '.join(redact.redact_assignments(base))}  ({ref_dir})")
    for r in results:
        print(f"  {'PASS' if r['ok'] else 'FAIL'}  {' '.join(r['candidate'])}: {r['result']}")
        print(f"        tokens/s/device against the reference: {r['speed_vs_reference']}")
    failed = sum(not r["ok"] for r in results)
    print(
        f"moekit verify: {len(results) - failed} of {len(results)} candidate(s) equivalent; details in {out / RESULT}"
    )
    return 1 if failed else 0
