"""The SQLite backend: one file per data dir (the default). See store.py."""
