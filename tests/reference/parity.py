"""Logits parity of every family with its transformers reference; regenerates docs/adapting.md's table.

    .venv/bin/python tests/reference/parity.py [--write]      # needs .venv-ref (make venv-ref)

Per family: tests/reference/hf_tiny.py builds the tiny reference (its row's tiny_config) in .venv-ref (random
weights, fp32) and its logits on fixed token ids; `moekit checkpoint import` converts it;
tests/reference/maxtext_logits.py runs MaxText's model on the same ids, per CPU back end (moe=dense:
sparse_matmul=false; moe=ragged_dot: the grouped path). Reported: max |logit diff|, that relative to the reference
logits' max |logit|, and the mean KL(reference || MaxText) per token.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from moekit.config.kinds.families import FAMILIES as FAMILY_ROWS

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
REF_PY = REPO / ".venv-ref" / "bin" / "python"
# hf_tiny family -> its row's Hugging Face entry (config/kinds/families.py): the parity references, and the entries
# without one (MaxText has no mapping for them; the table says why).
REFERENCES = {h.tiny: h for f in FAMILY_ROWS.values() for h in f.hf if h.tiny}
FAMILIES = {name: (h.option, h.reference_class) for name, h in REFERENCES.items()}
UNMATCHED = [(f.decoder_block, h) for f in FAMILY_ROWS.values() for h in f.hf if not h.tiny]
BACKENDS = ("dense", "ragged_dot")
TOLERANCE = 1e-4  # max |diff| relative to the logits' scale (max |logit|), fp32
BEGIN, END = "<!-- BEGIN logits parity -->", "<!-- END logits parity -->"


def ref_venv() -> Path:
    if not REF_PY.is_file():
        raise SystemExit(f"{REF_PY} missing: run `make venv-ref` (torch + transformers on CPU, about 2 minutes)")
    return REF_PY


def reference(family: str, out: Path, tokens_file: Path | None = None) -> None:
    """The family's tiny reference (its row's tiny_config, random weights) built by hf_tiny.py in .venv-ref into
    `out`, with its logits on `tokens_file`'s ids when given."""
    config = out.with_name(f"{out.name}.config.json")
    config.write_text(json.dumps(REFERENCES[family].tiny_config))
    script = str(REPO / "tests/reference/hf_tiny.py")
    run([str(ref_venv()), script, str(config), str(out), *([str(tokens_file)] if tokens_file else [])])


def tokens(path: Path) -> np.ndarray:
    t = np.random.default_rng(0).integers(0, 256, (2, 17)).astype(np.int32)
    np.save(path, t)
    return t


def run(cmd: list[str]) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return p.stdout


def kl(ref: np.ndarray, ours: np.ndarray) -> float:
    def logsoftmax(x):
        x = x.astype(np.float64)
        m = x.max(-1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))

    p, q = logsoftmax(ref), logsoftmax(ours)
    return float((np.exp(p) * (p - q)).sum(-1).mean())


def measure(family: str, work: Path) -> list[dict]:
    """One family's rows; the import and MaxText's forward passes run in this process (one JAX start for all)."""
    from maxtext_logits import logits

    from moekit.cli import main as moekit_main
    from moekit.commands.checkpoint import _args
    from moekit.config.compose import compose

    option, cls = FAMILIES[family]
    tok = work / "tokens.npy"
    ids = tokens(tok)
    ref = work / family
    reference(family, ref, tok)
    imp = work / f"{family}-imported"
    code = moekit_main(["checkpoint", "import", "--family", option, str(ref), "precision=fp32", "--out", str(imp)])
    if code:
        raise RuntimeError(f"moekit checkpoint import of {family} exited {code}")
    record = json.loads((imp / "moekit-import.json").read_text())
    ref_logits = np.load(ref / "logits.npy")
    rows = []
    for backend in BACKENDS:
        cfg = compose(["experiment=smoke", f"model={option}", f"moe={backend}", "precision=fp32", *record["overrides"]])
        ours, _ = logits(str(imp), ids, _args(cfg))
        diff = float(np.abs(ours - ref_logits).max())
        scale = float(np.abs(ref_logits).max())
        rel = diff / scale
        rows.append(
            {
                "family": family,
                "class": cls,
                "backend": backend,
                "max_diff": diff,
                "relative": rel,
                "kl": kl(ref_logits, ours),
                "status": "match" if rel <= TOLERANCE else f"differs (relative {rel:.1e} > {TOLERANCE:g})",
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| family | reference class | back end | max abs diff (relative) | KL | status |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['family']} | {r['class']} | {r['backend']} | {r['max_diff']:.2e} ({r['relative']:.1e}) "
            f"| {r['kl']:.1e} | {r['status']} |"
        )
    lines += [f"| {name} | {h.reference_class} | - | - | - | not matched: {h.no_mapping} |" for name, h in UNMATCHED]
    return "\n".join(lines)


def main(write: bool) -> str:
    with tempfile.TemporaryDirectory() as d:
        rows = [r for f in FAMILIES for r in measure(f, Path(d))]
    text = table(rows)
    if write:
        doc = REPO / "docs" / "adapting.md"
        s = doc.read_text(encoding="utf8")
        head, rest = s.split(BEGIN)
        _, tail = rest.split(END)
        doc.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf8")
    print(text)
    print("ROWS " + json.dumps(rows))
    return text


if __name__ == "__main__":
    main("--write" in sys.argv)
