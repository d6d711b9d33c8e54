"""The reference side of the parity tests: a tiny Hugging Face model with random weights, its logits and loss.

Runs in .venv-ref (torch + transformers on CPU; `make venv-ref`), never in the training venv:

    .venv-ref/bin/python tests/reference/hf_tiny.py CONFIG.json OUT_DIR [TOKENS.npy]

CONFIG.json is a family row's tiny reference config (HfModel.tiny_config in src/moekit/config/kinds/families.py, written
out by tests/reference/parity.py: this venv has no moekit). Writes OUT_DIR/config.json + model.safetensors
(save_pretrained, fp32) and, given token ids (int32, batch x length+1: inputs are [:, :-1], targets [:, 1:]),
OUT_DIR/logits.npy (fp32) and OUT_DIR/reference.json (the mean next-token cross entropy, the model class,
versions). No download.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers


def build(values: dict) -> torch.nn.Module:
    """The tiny model of this config with random weights (seed 0): norms near 1, every other tensor N(0, 0.1^2)."""
    values = dict(values)
    config = transformers.AutoConfig.for_model(values.pop("model_type"), **values)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.ndim == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek-V3's selection bias is a buffer
                b.copy_(0.1 * torch.randn_like(b))
    return model


def main(config_file: Path, out: Path, tokens_file: Path | None) -> None:
    model = build(json.loads(config_file.read_text()))
    model.save_pretrained(out, safe_serialization=True)
    if tokens_file is None:
        return
    tokens = torch.from_numpy(np.load(tokens_file)).long()
    with torch.no_grad():
        logits = model(input_ids=tokens[:, :-1]).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    np.save(out / "logits.npy", logits.numpy())
    record = {
        "class": type(model).__name__,
        "loss": float(loss),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    (out / "reference.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else None)
