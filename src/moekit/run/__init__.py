"""The run lifecycle of `moekit train`: what happens between a checked config and a recorded outcome.

- preflight: host probes (run directory, rendezvous environment, ports, GPUs, TransformerEngine, the XLA flags
  and MaxText keys the installed stack accepts), the same for a real run and for --dry-run;
- xla_flags: which XLA flags the installed jaxlib knows (asked once per jaxlib version, cached);
- checkpoints: setting aside a checkpoint that does not restore, so a resume falls back to an older one.
"""
