"""The reference side of the parity tests: a tiny Hugging Face model with random weights, its logits and loss.

Runs in .venv-ref (torch + transformers on CPU; `make venv-ref`), never in the training venv:

    .venv-ref/bin/python tests/reference/hf_tiny.py FAMILY OUT_DIR [TOKENS.npy]

Writes OUT_DIR/config.json + model.safetensors (save_pretrained, fp32) and, given token ids (int32, batch x
length+1: inputs are [:, :-1], targets [:, 1:]), OUT_DIR/logits.npy (fp32) and OUT_DIR/reference.json (the mean
next-token cross entropy, the model class, versions). No download: the config is written here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers

_COMMON = {"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 256, "tie_word_embeddings": False}
# Tiny configs: 2 layers, small widths, few experts; routing, rope and norms as the full-size published ones.
CONFIGS = {
    "deepseek3": _COMMON
    | {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 2,
        "first_k_dense_replace": 1,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "num_key_value_heads": 4,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 163840,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    },
    "qwen3_moe": _COMMON
    | {
        "model_type": "qwen3_moe",
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0},
    },
    "mixtral": _COMMON
    | {
        "model_type": "mixtral",
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 32,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "rms_norm_eps": 1e-5,
        "sliding_window": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    },
    "gpt_oss": _COMMON
    | {
        "model_type": "gpt_oss",
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 32,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention"],
        "rms_norm_eps": 1e-5,
        "swiglu_limit": 7.0,
        "attention_bias": True,
        "max_position_embeddings": 131072,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 150000.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
    },
}
CONFIGS["deepseek2"] = {
    k: v for k, v in CONFIGS["deepseek3"].items() if k not in ("q_lora_rank", "n_group", "topk_group")
} | {
    "model_type": "deepseek_v2",
    "q_lora_rank": None,
    "n_shared_experts": 2,
    "scoring_func": "softmax",
    "topk_method": "greedy",
    "norm_topk_prob": False,
    "routed_scaling_factor": 1.0,
    "rope_parameters": CONFIGS["deepseek3"]["rope_parameters"] | {"mscale": 0.707, "mscale_all_dim": 0.707},
}


def build(family: str) -> torch.nn.Module:
    """The tiny model with random weights (seed 0): norms near 1, every other tensor N(0, 0.1^2)."""
    values = dict(CONFIGS[family])
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


def main(family: str, out: Path, tokens_file: Path | None) -> None:
    model = build(family)
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
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else None)
