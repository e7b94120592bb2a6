"""How much of the evidence a search puts in front of the model, and whether a difference
between two methods is real (docs/search.md, "How retrieval is measured").

* `recall_at(ids, evidence, k)`: the share of evidence turns among the first k distinct
  hits, and nothing else (a reply shown under a hit is scored in its own column).
* `TokenBudget`: the share of evidence turns whose text lies in the first N tokens of the
  tool's output, exactly as the model receives it (pages 1, 2, ... one after another),
  with tokens counted as the engine counts a tool result: the text as JSON in the request
  (`canonical_json`), at a fresh `TokenCounter`'s ratio (2.5 UTF-8 bytes per token, one
  character of English each, plus its 10% safety margin). A counter calibrated on Claude counts English at ~3.5 characters
  a token, so the same budget holds about 40% more text there: these figures are cautious.
* `paired_bootstrap`: a 95% interval for the mean per-question difference of two methods.
* `two_fold`: a weight chosen on one half of the conversations and reported on the other,
  both ways, so no figure is tuned on the data it is reported on.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from memgpt_lite.engine.records import canonical_json
from memgpt_lite.engine.tokens import TokenCounter

BUDGETS = (500, 1000, 2000)


def recall_at(ids: Sequence[Any], evidence: set[Any], k: int) -> float:
    """The share of `evidence` among the first k distinct `ids`."""
    seen: list[Any] = []
    for i in ids:
        if i not in seen:
            seen.append(i)
        if len(seen) == k:
            break
    return len(evidence & set(seen)) / len(evidence) if evidence else 0.0


class TokenBudget:
    """Which texts the first N tokens of a tool output hold, counted as the engine counts."""

    def __init__(self, counter: TokenCounter | None = None):
        self.counter = counter or TokenCounter()

    def tokens(self, text: str) -> int:
        return self.counter.estimate_json(text)

    def prefix(self, text: str, tokens: int) -> str:
        """The longest start of `text` the engine counts at no more than `tokens`."""
        if self.tokens(text) <= tokens:
            return text
        low, high = 0, len(text)
        while low < high:  # binary search: the estimate grows with the prefix
            mid = (low + high + 1) // 2
            if self.tokens(text[:mid]) <= tokens:
                low = mid
            else:
                high = mid - 1
        return text[:low]

    def found(self, output: str, evidence: dict[Any, str],
              budgets: Sequence[int] = BUDGETS) -> dict[int, float]:
        """{budget: share of evidence texts wholly inside the output's first `budget`
        tokens}. Texts are compared with runs of whitespace made single spaces, as the tool
        prints each message on one line; a text shown only in part does not count."""
        texts = {key: _flat(text) for key, text in evidence.items()}
        out = {}
        for budget in budgets:
            head = _flat(self.prefix(output, budget))
            got = sum(1 for t in texts.values() if t and t in head)
            out[budget] = got / len(texts) if texts else 0.0
        return out


def _flat(text: str) -> str:
    return " ".join(text.split())


def json_chars(text: str) -> int:
    """Characters of `text` as it stands in a request (quotes and escapes included)."""
    return len(canonical_json(text))


# --------------------------------------------------------------------------- statistics


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, resamples: int = 2000,
                     seed: int = 1) -> dict[str, float]:
    """Mean of b − a over paired questions, with a 95% percentile interval from
    `resamples` resamples of the questions (the same resample for both methods)."""
    if len(a) != len(b) or not a:
        raise ValueError("paired_bootstrap needs two equally long, non-empty lists")
    diffs = [y - x for x, y in zip(a, b)]
    rng, n = random.Random(seed), len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return {"diff": round(sum(diffs) / n, 4), "low": round(means[int(0.025 * resamples)], 4),
            "high": round(means[int(0.975 * resamples) - 1], 4), "n": n}


def two_fold(groups: Sequence[Any], candidates: Sequence[Any],
             score: Callable[[Any, Sequence[Any]], list[float]]) -> dict[str, Any]:
    """Choose a candidate (a weight, a threshold) on half of `groups` (conversations) and
    report it on the other half, both ways. `score(candidate, groups)` returns one value per
    question. Returns the per-question values of the held-out halves, in `groups` order,
    and the candidate each half chose."""
    half = len(groups) // 2
    first, second = groups[:half], groups[half:]

    def best(tune: Sequence[Any]) -> Any:
        return max(candidates, key=lambda c: _mean(score(c, tune)))

    on_second, on_first = best(second), best(first)
    values = score(on_second, first) + score(on_first, second)
    chosen = [on_first, on_second]
    return {"chosen": chosen, "values": values, "mean": round(_mean(values), 4)}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
