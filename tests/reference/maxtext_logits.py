"""The MaxText side of the parity tests: logits and loss of an imported checkpoint on given token ids (training venv).

    python tests/reference/maxtext_logits.py CKPT_DIR TOKENS.npy OUT.npy MAXTEXT_ARG ...

CKPT_DIR is what `moekit checkpoint import` wrote; the MaxText arguments are the run's (moekit's translation). The
forward pass is MaxText's own model (models.transformer_as_linen) in train mode, without dropout; prints the mean
next-token cross entropy as `LOSS <value>`.
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from maxtext.common.common_types import MODEL_MODE_TRAIN  # noqa: E402
from maxtext.configs import pyconfig  # noqa: E402
from maxtext.layers import quantizations  # noqa: E402
from maxtext.models import models  # noqa: E402
from maxtext.utils import maxtext_utils  # noqa: E402


def logits(ckpt: str, tokens: np.ndarray, args: list[str]) -> tuple[np.ndarray, float]:
    """MaxText's fp32 logits (batch, length, vocab) for tokens[:, :-1], and the mean cross entropy on tokens[:, 1:]."""
    b, n = tokens.shape[0], tokens.shape[1] - 1
    config = pyconfig.initialize(
        ["train", *args, "skip_jax_distributed_system=true", f"per_device_batch_size={b}", f"max_target_length={n}"]
    )
    mesh = jax.sharding.Mesh(maxtext_utils.create_device_mesh(config), config.mesh_axes)
    model = models.transformer_as_linen(
        config, mesh, quant=quantizations.configure_quantization(config), model_mode=MODEL_MODE_TRAIN
    )
    variables = ocp.PyTreeCheckpointer().restore(os.path.join(ckpt, "0", "items"))["params"]
    inputs = jnp.asarray(tokens[:, :-1])
    positions = jnp.broadcast_to(jnp.arange(n), (b, n))
    with jax.set_mesh(mesh):
        out = model.apply(
            variables, inputs, positions, decoder_segment_ids=jnp.ones((b, n), jnp.int32), enable_dropout=False
        )
    out = np.asarray(out[0] if isinstance(out, tuple) else out, dtype=np.float32)
    x = out.astype(np.float64)
    logp = x - x.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    return out, float(-np.take_along_axis(logp, tokens[:, 1:, None], -1).mean())


def main(ckpt: str, tokens_file: str, out: str, args: list[str]) -> None:
    values, loss = logits(ckpt, np.load(tokens_file), args)
    np.save(out, values)
    print(f"LOSS {loss}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
