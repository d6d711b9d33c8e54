"""Probes of the host before launch: the run directory, rendezvous environment, ports, GPUs, TransformerEngine,
data files and tokenizer (data), the XLA flags and MaxText keys the installed stack accepts (xla_flags,
maxtext_validate). The same table for a real run and for --dry-run (host)."""
