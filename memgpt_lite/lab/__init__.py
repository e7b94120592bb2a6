"""The lab: measuring the agent, never part of a chat.

* Evaluation: `scenarios` (scenario files, running them, checks, the report), `judge` (the
  model-graded check), `compare` (combining and comparing reports); `harness` holds what
  every run shares (the error for a bad file, the fixed clock).
* Dataset runners: `locomo` (LoCoMo), `nested_kv` (MemGPT's nested key-value retrieval).
* Benchmarks: `bench` (`memgpt-lite bench`), `retrieval_eval` (search quality).
* Test doubles: `scripted` (a scripted model client), `fake_server` (an Anthropic-compatible
  server on 127.0.0.1).
"""
