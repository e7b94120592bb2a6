"""`python -m memgpt_lite.lab.bench [store] ...`: the same command as `memgpt-lite bench`."""

from __future__ import annotations

from memgpt_lite.lab.bench.suite import main

if __name__ == "__main__":
    raise SystemExit(main())
