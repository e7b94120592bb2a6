"""memgpt_lite: a small MemGPT-style agent that manages its own memory on Claude."""

__version__ = "0.1.0"
