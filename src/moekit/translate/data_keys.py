"""Translate the data section into MaxText's input-pipeline keys (pure)."""

from __future__ import annotations

from moekit.config.schema import Data, Scalar

# data.format -> the `path` argument of Hugging Face's datasets.load_dataset (a packaged builder for local files).
HF_BUILDERS = {"parquet": "parquet", "json": "json", "arrow": "arrow"}


def data_keys(data: Data) -> dict[str, Scalar | list[str]]:
    """MaxText keys of the input pipeline; synthetic data needs only its dataset_type."""
    keys: dict[str, Scalar | list[str]] = {"dataset_type": data.dataset_type}
    if data.max_segments_per_seq > 0:  # read by the attention kernel, whatever the data
        keys["max_segments_per_seq"] = data.max_segments_per_seq
    if data.dataset_type == "hf":
        keys |= {"hf_path": HF_BUILDERS.get(data.format or "", data.format), "hf_train_files": data.files}
        keys["tokenizer_type"] = "huggingface"
    elif data.dataset_type == "grain":
        keys |= {"grain_file_type": data.format, "grain_train_files": data.files, "tokenizer_type": data.tokenizer_type}
        if data.epochs != 1:
            keys["num_epoch"] = data.epochs
    else:
        return keys
    if data.files is None:  # data.corpus: the files are known on the training host, once it has prepared them
        keys.pop("hf_train_files", None)
        keys.pop("grain_train_files", None)
    keys |= {
        "tokenizer_path": data.tokenizer,
        "train_data_columns": [data.column],
        "packing": data.packing,
        "grain_worker_count": data.workers,
        "enable_data_shuffling": data.shuffle,
    }
    return keys
