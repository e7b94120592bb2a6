"""LoCoMo retrieval, scored honestly (docs/search.md, "How retrieval is measured").

Each question goes raw through search, per method (keyword; with an embedder also dense
only and hybrid). For each method a question's row holds:

* `recall@5`, `recall@10`, `recall@20`: evidence among the first k distinct hits;
* `recall@10 + replies`: the same ten hits with the message that followed each (its own
  column: more text, not more hits);
* `in 500` / `in 1000` / `in 2000` tokens: evidence wholly inside the first N tokens of what
  `conversation_search` returns, pages 1, 2, ... one after another, as the model reads them
  (`recall_metrics.TokenBudget`);
* `chars@10`, `chars@10 + replies`: characters the first ten hits show, without and with
  the reply under each.

Everything goes through the `Store` protocol, so it runs on SQLite and on Postgres alike.
"""

from __future__ import annotations

from typing import Any

from memgpt_lite.engine.memory import MemoryTools
from memgpt_lite.lab.harness import ScenarioError
from memgpt_lite.lab.recall_metrics import BUDGETS, TokenBudget, recall_at

MAX_PAGES = 12  # enough pages for the largest budget, even of one-line hits
RANKED = 20  # hits ranked per question for recall@k


def budget_key(tokens: int) -> str:
    return f"in {tokens} tokens"


METRICS = ("recall@5", "recall@10", "recall@20", "recall@10 + replies",
           *(budget_key(b) for b in BUDGETS), "chars@10", "chars@10 + replies")


class CachedDense:
    """A dense side that embeds each query once, then serves the same candidates for every
    page and every fusion weight asked of it (the tool asks once per page)."""

    def __init__(self, dense: Any, keyword_weight: float | None = None):
        self.dense = dense
        self.keyword_weight = keyword_weight
        self.cache: dict[tuple, tuple[dict[int, float] | None, float]] = {}

    def with_weight(self, weight: float) -> CachedDense:
        other = CachedDense(self.dense, weight)
        other.cache = self.cache
        return other

    def rank(self, tool: str, kind: str, query: str, start_date: str | None = None,
             end_date: str | None = None) -> tuple[dict[int, float] | None, float, list]:
        key = (kind, query, start_date, end_date)
        if key not in self.cache:
            scores, weight, _ = self.dense.rank(tool, kind, query, start_date, end_date)
            if scores is None:
                # The chat searches by keywords then; scored so, dense and hybrid figures
                # would be keyword figures under their names.
                raise ScenarioError(f"the embedder failed on the question {query!r}: "
                                    f"{getattr(self.dense, 'last_error', '') or 'no vectors'} "
                                    "(dense and hybrid cannot be scored without it)")
            self.cache[key] = (scores, weight)
        scores, weight = self.cache[key]
        return scores, weight if self.keyword_weight is None else self.keyword_weight, []


def tool_output(tools: MemoryTools, question: str, budget: TokenBudget,
                tokens: int = max(BUDGETS)) -> str:
    """What conversation_search returns for pages 1, 2, ... until `tokens` are read or the
    results run out, joined as the model would read them one after another."""
    parts: list[str] = []
    for page in range(1, MAX_PAGES + 1):
        outcome = tools.execute("conversation_search", {"query": question, "page": page})
        if outcome.is_error:
            break
        parts.append(outcome.text)
        if budget.tokens("\n".join(parts)) > tokens or _last_page(outcome.text, page):
            break
    return "\n".join(parts)


def _last_page(text: str, page: int) -> bool:
    head = text.split("\n", 1)[0]  # "page p of n, m results"
    words = head.replace(",", "").split()
    return len(words) < 4 or not words[3].isdigit() or page >= int(words[3])


def score_method(store: Any, agent_id: int, question: str, tools: MemoryTools,
                 evidence: list[str], mapping: dict[int, str], texts: dict[str, str],
                 budget: TokenBudget) -> tuple[dict[str, float], list[str | None]]:
    """One method's row for one question (see the module docstring), ranked as `tools`
    rank for conversation_search, and its top ten hits as dia_ids."""
    page, _ = tools.message_page(question, per_page=RANKED)
    hits = [mapping.get(h.id) for h in page.hits]
    want = set(evidence)
    row = {f"recall@{k}": recall_at(hits, want, k) for k in (5, 10, 20)}
    top = page.hits[:10]
    replies = store.replies(agent_id, [h.id for h in top])
    shown = [*(h.id for h in top), *(r.id for rs in replies.values() for r in rs)]
    row["recall@10 + replies"] = len(want & {mapping.get(i) for i in shown}) / len(want)
    row["chars@10"] = sum(len(h.text) for h in top)
    row["chars@10 + replies"] = row["chars@10"] + sum(len(r.text) for rs in replies.values()
                                                      for r in rs)
    output = tool_output(tools, question, budget)
    found = budget.found(output, {e: texts.get(e, "") for e in want})
    row.update({budget_key(b): v for b, v in found.items()})
    return row, hits[:10]


def dense_only(store: Any, agent_id: int, scores: dict[int, float], evidence: list[str],
               mapping: dict[int, str]) -> dict[str, float]:
    """recall@k of the dense side alone (the tool never shows it alone: no budget columns)."""
    top = sorted(scores, key=lambda i: (-scores[i], -i))[:RANKED]
    hits = [mapping.get(i) for i in top]
    return {f"recall@{k}": recall_at(hits, set(evidence), k) for k in (5, 10, 20)}
