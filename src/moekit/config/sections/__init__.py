"""The schema's sections, one module per group; config/schema.py composes them into `Config`."""
