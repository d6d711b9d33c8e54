"""moekit: reproduction kit for dropless MoE training with JAX, Transformer Engine and MaxText."""

__version__ = "0.1.0"
