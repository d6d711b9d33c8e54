"""Data moekit prepares on the training host before it trains: text files -> training shards (text_shards), the
standard-library corpus of data=stdlib (corpus)."""
