"""Hugging Face checkpoints in and out: import into an Orbax checkpoint a run starts from
(`checkpoint.init_from=DIR`), export back to safetensors. The conversion itself is MaxText 0.2.5's
(maxtext.checkpoint_conversion: to_maxtext's loaders, param mappings and hooks; to_huggingface's inverse);
this package reads the folder within bounds (`files`), writes beside `--out` only into a folder it made
(`target`), and adds the progress bar, the summary and the record (`orbax`)."""
