"""Microbenchmarks of the MoE building blocks on the local accelerator (effects: they run kernels)."""
