"""The kind tables: one row per MoE back end, cluster kind, model family and hardware generation (pure data and
their lookups), read by the checks, translation and the commands."""
