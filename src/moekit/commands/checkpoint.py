"""`moekit checkpoint import|export`: Hugging Face checkpoints in and out of the Orbax format runs start from.

    moekit checkpoint import --family deepseek2_16b ~/DeepSeek-V2-Lite --out /ckpt/dsv2   # then:
    moekit train experiment=dsv2_lite_8gpu checkpoint.init_from=/ckpt/dsv2
    moekit checkpoint export /ckpt/dsv2 --out ~/dsv2-hf                              # back to safetensors
    moekit checkpoint export outputs/<run>/<run name>/checkpoints/9 --out ~/trained-hf   # what `train` saved

`--family` is the model option (conf/model/) the checkpoint is an instance of; a checkpoint of another shape (a
smaller one) gets the option's routing and the checkpoint's widths, printed as the overrides the run needs. Before
anything is written the family, every architectural value and every tensor's shape are checked, and the first
difference is named. Export reads the model from the import's record, or from the config.yaml of the run that saved
the checkpoint. A progress bar goes to stderr, the summary to stdout; MaxText's own log lines are kept off both.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

HELP = "import a Hugging Face checkpoint folder into an Orbax checkpoint (checkpoint.init_from=), or export one"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The import and export subcommands."""
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = sub.add_parser("import", help="a local Hugging Face checkpoint folder -> an Orbax checkpoint runs start from")
    q.add_argument(
        "src_and_overrides",
        nargs="+",
        metavar="SRC [OVERRIDE ...]",
        help="a folder with config.json and *.safetensors; then overrides of the run (default experiment=smoke)",
    )
    q.add_argument("--family", required=True, help="the model option it is an instance of (deepseek3_671b, ...)")
    q.add_argument("--out", type=Path, required=True, help="a new folder for the Orbax checkpoint")
    e = sub.add_parser("export", help="an imported or trained Orbax checkpoint -> Hugging Face safetensors")
    e.add_argument(
        "src",
        type=Path,
        help="a folder `checkpoint import` wrote, or a run's <run.dir>/<run.name>/checkpoints/<step> folder",
    )
    e.add_argument("--out", type=Path, required=True, help="a new folder for config.json + model.safetensors")


def _compose(family: str, overrides: list[str]):
    from moekit.config.compose import compose

    base = [] if any(o.startswith("experiment=") for o in overrides) else ["experiment=smoke"]
    return compose([*base, f"model={family}", *overrides])


def _args(cfg) -> list[str]:
    from moekit.translate.maxtext_args import maxtext_args

    skip = ("load_parameters_path", "metrics_file", "base_output_directory", "run_name")
    return [a.render() for a in maxtext_args(cfg, "/tmp/moekit-ckpt", "/tmp/moekit-ckpt/m.jsonl") if a.key not in skip]


def _export(args: argparse.Namespace) -> int:
    from moekit.checkpoint.convert import orbax, sources, target

    target.check(args.out, "export")  # before anything is loaded
    src = args.src.absolute()
    if (record := sources.import_record(src)) is not None:
        cfg = _compose(record["family"], record["overrides"])
        hf_config, mapping = record["hf_config"], record["mapping"]
    else:
        cfg, hf_config, mapping = sources.run_checkpoint(src)
    out = args.out.absolute()
    need = sum(p.stat().st_size for p in src.rglob("*") if p.is_file() and not p.is_symlink())  # about its tensors
    with target.writing(out, "export", need) as tmp, orbax.quiet():
        summary = orbax.export_checkpoint(src, hf_config, mapping, _args(cfg), tmp)
    summary.out = out
    print(summary.text("exported"))
    return 0


def run(args: argparse.Namespace) -> int:
    """Import or export; a refused checkpoint exits 2 with the first difference named (moekit.cli)."""
    from moekit.checkpoint.convert import orbax

    orbax.quiet_jax()
    from moekit.base.maxtext_files import model_values
    from moekit.checkpoint.convert import files, target
    from moekit.checkpoint.model import hf
    from moekit.plan import resolved_values

    if args.action == "export":
        return _export(args)
    args.src, args.overrides = Path(args.src_and_overrides[0]), list(args.src_and_overrides[1:])
    target.check(args.out, "import")
    ckpt = files.read(args.src)
    probe = _compose(args.family, list(args.overrides))
    mapping = hf.family_check(ckpt.config, probe.model.decoder_block, args.family)
    shape = hf.override_strings(ckpt.config)
    cfg = _compose(args.family, [*args.overrides, *shape])
    hf.architecture_check(ckpt.config, resolved_values(cfg, *model_values(cfg.model.name)))
    unused = hf.shape_check(ckpt, mapping)
    own = _needed(probe, resolved_values(probe, *model_values(probe.model.name)), shape)
    record = {
        "family": args.family,
        "overrides": [*args.overrides, *shape],
        "mapping": mapping,
        "source": str(args.src.resolve()),
        "hf_config": ckpt.config,
        "tensors": len(ckpt.tensors),
        "parameters": ckpt.parameters,
        # what a run adds to model=<family> to train this checkpoint's model (the preflight's fix names these)
        "train_overrides": [*(o for o in args.overrides if o.startswith("model.")), *own],
    }
    out = args.out.absolute()
    # the folder is made (and its disk's room checked: the tensors keep their dtype) before the conversion starts
    with target.writing(out, "import", ckpt.bytes) as tmp, orbax.quiet():
        summary = orbax.import_checkpoint(ckpt, mapping, _args(cfg), tmp, record)
    summary.out = out
    summary.tensors, summary.parameters = len(ckpt.tensors) - len(unused), ckpt.parameters
    print(summary.text(f"imported {args.src} ({ckpt.bytes / 2**20:,.1f} MiB of safetensors)"))
    if unused:
        print(f"  not imported: {len(unused)} tensor(s) MaxText's model has no place for, e.g. {unused[0]}")
    line = [f"model={args.family}", *args.overrides, f"checkpoint.init_from={args.out.absolute()}", *own]
    print(f"  train from it: moekit train {shlex.join(line)}")
    return 0


def _needed(probe, values: dict, shape: list[str]) -> list[str]:
    """The shape overrides whose value the option does not already have (those the train command must repeat)."""
    out = []
    for o in shape:
        key, value = o.split("=", 1)
        name = key.rsplit(".", 1)[1]
        have = values.get(name) if key.startswith("model.extra.") else getattr(probe.model, name)
        if str(have) != value and not (_num(have) is not None and _num(have) == _num(value)):
            out.append(o)
    return out


def _num(x) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None
