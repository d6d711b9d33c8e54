"""A Hugging Face checkpoint's model, pure: its architecture in moekit's vocabulary (`architecture`), its config.json
checked before any value is used (`hf_config`), and the refusals that compare it with a model option (`hf`)."""
