"""Prompt files shipped as package data (installed as memgpt_lite._prompts)."""
