"""Minimal reproduction, for upstream: TransformerEngine's JAX DotProductAttention given a dense segment mask in the
BSHD layout with attn_mask_type="padding_causal" (what MaxText 0.2.5's `cudnn_flash_attention` does for synthetic
data whose rows hold several segments) attends only the first segment's queries.

    python benchmarks/te_dense_mask_repro.py       # needs a GPU with TransformerEngine (JAX)

TE turns a dense mask into one (q, kv) length per row (`_legacy_fused_attn`): q = queries allowed to see key 0,
kv = the longest row. A block-diagonal mask (two segments) thus becomes "the first segment's length", and every
query after it gets a zero output. Prints the share of zero rows and the difference to the same attention
computed with one causal mask per segment; exits 1 when the zero rows appear.
"""

import sys

import jax
import jax.numpy as jnp
from transformer_engine.jax.flax.transformer import DotProductAttention

b, s, h, d = 1, 512, 4, 64
kq, kk, kv = jax.random.split(jax.random.PRNGKey(0), 3)
q, k, v = (jax.random.normal(x, (b, s, h, d), jnp.bfloat16) for x in (kq, kk, kv))
seg = jnp.where(jnp.arange(s) < 128, 1, 2)[None]  # two segments: 128 and 384 tokens
# MaxText's convention for TE: 1 = masked out, built FULL (no causal part: causality comes from the mask type)
mask = (seg[:, None, :, None] != seg[:, None, None, :]).astype(jnp.uint8)
dpa = DotProductAttention(head_dim=d, num_attention_heads=h, num_gqa_groups=h, attn_mask_type="padding_causal",
                          qkv_layout="BSHD_BSHD_BSHD", scale_factor=d**-0.5, transpose_batch_sequence=False)
out = dpa.apply({}, q, k, v, sequence_descriptor=mask)

allowed = jnp.tril(jnp.ones((s, s), bool)) & (seg[0][:, None] == seg[0][None, :])
logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * d**-0.5
ref = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(jnp.where(allowed, logits, -jnp.inf), -1), v.astype(jnp.float32))
zero = float(jnp.mean(jnp.all(out == 0, axis=(-1, -2))))
err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref)) / jnp.max(jnp.abs(ref)))
print(f"zero query rows: {zero:.0%} (the second segment is 75%); max relative difference to the reference: {err:.2e}")
sys.exit(1 if zero > 0 else 0)
