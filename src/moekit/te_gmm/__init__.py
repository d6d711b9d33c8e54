"""moe=te_gmm: MaxText's own dropless sparse path with its expert GEMMs on TransformerEngine's grouped GEMM.

MaxText 0.2.5 (`sparse_matmul=true megablox=false use_tokamax_gmm=false`) sorts tokens by expert, sends them
over its ragged all-to-all when experts are sharded, and computes each expert GEMM (wi_0, wi_1, wo) with one
`jax.lax.ragged_dot` call. Each training process hands that one call to TE's `grouped_dense` before the
trainer starts (`hook`), after checking that the MaxText source is the one this was written against
(`call_site`); `grouped` adapts MaxText's arguments to TE's contract; `preflight` checks the host first.
"""

# The launcher -> worker contract (translate/env.py sets them, hook.install_from_env reads them).
MODE_ENV = "MOEKIT_RAGGED_DOT"  # which grouped GEMM takes MaxText's ragged_dot call (hook.MODES)
BUCKETS_ENV = "MOEKIT_RAGGED_DOT_BUCKETS"  # static row counts per call (expert parallelism: receive-buffer tail)


def engaged(environ: dict[str, str]) -> bool:
    """Whether this worker's environment asks for the hook (the back end's contract: config/kinds/backends.py)."""
    return bool(environ.get(MODE_ENV))
