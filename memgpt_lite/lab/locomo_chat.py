"""LoCoMo through the chat: recall within a token budget of what the model gets back when it
calls `conversation_search` with each question, over a whole piped conversation.

    python -m memgpt_lite.lab.locomo_chat locomo10.json [--samples N] [--layout N |
        --variant NAME] [--json OUT]

Each utterance ("Speaker: text") is one user turn of a real `Agent`, at its session's time,
answered "OK." by a scripted model, as when a conversation is piped into `memgpt-lite chat`;
the pager evicts and summarises as it would (a scripted summary). Then each question is a
turn of its own, and the model calls `conversation_search` with the question, pages 1 and 2,
before it answers: the questions stay in the history, as in real use, so later searches meet
earlier questions. A question's figure is the share of its evidence turns whose whole text
lies in the first N tokens of those two results (`recall_metrics.TokenBudget`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from memgpt_lite.engine import recall_page
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.records import ModelRequest, ModelResponse, parse_iso
from memgpt_lite.engine.store import open_store
from memgpt_lite.lab.harness import StepClock
from memgpt_lite.lab.locomo import (
    _after_last,
    _category_name,
    _evidence,
    load_locomo,
    locomo_utterances,
)
from memgpt_lite.lab.recall_metrics import BUDGETS, TokenBudget
from memgpt_lite.lab.retrieval_levers import VARIANTS, overridden
from memgpt_lite.lab.scripted import estimate_usage, text_response, tool_response


class _Policy:
    """The model: "OK." to an utterance; to a question, conversation_search pages 1 and 2
    with the question, then an answer."""

    def __init__(self) -> None:
        self.question: str | None = None
        self.pages = 0

    def stream(self, request: ModelRequest) -> Any:
        response = self._answer(request)
        yield ModelResponse(response.content, response.stop_reason,
                            estimate_usage(request, response), request.model)

    def _answer(self, request: ModelRequest) -> ModelResponse:
        if self.question is None:
            return text_response("OK.")
        if self.pages < 2:
            self.pages += 1
            return tool_response([("conversation_search",
                                   {"query": self.question, "page": self.pages})])
        self.question, self.pages = None, 0
        return text_response("Answered.")


class _Summaries:
    """The summariser's model: a fixed summary of whatever it is given."""

    def stream(self, request: ModelRequest) -> Any:
        response = text_response("Earlier turns: the two speakers chatted about their lives.")
        yield ModelResponse(response.content, "end_turn", estimate_usage(request, response),
                            request.model)


def run(path: str, samples: int | None = None, layout: int | None = None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    budget = TokenBudget()
    for index, sample in enumerate(load_locomo(path)[:samples]):
        rows += _sample(sample, index, budget, layout)
    core = [r for r in rows if r["category"][:1] in "1234"]
    return {"questions": len(rows), "by_category": _by_category(rows),
            "categories 1-4": _mean(core)}


def _sample(sample: dict[str, Any], index: int, budget: TokenBudget,
            layout: int | None) -> list[dict[str, Any]]:
    policy = _Policy()
    utterances = locomo_utterances(sample["conversation"])
    texts = {u.dia_id: f"{u.speaker}: {u.text}" for u in utterances}
    with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp) / "chat.db") as store:
        clock = StepClock(_after_last(sample).now)
        agent = Agent.open(store, f"locomo-{index + 1}", model_client=policy,
                           summary_client=_Summaries(), settings=Settings(), clock=clock)
        if layout is not None:
            agent.set_search_layout(layout)
        for u in utterances:
            if u.created_at:
                clock.now = parse_iso(u.created_at)
            list(agent.step(texts[u.dia_id]))
        clock.now = _after_last(sample).now
        rows = []
        for qa in sample["qa"]:
            evidence = _evidence(qa)
            if not evidence:
                continue
            policy.question = str(qa.get("question", ""))
            events = list(agent.step(policy.question))
            output = "\n".join(e.result.content for e in events if e.kind == "tool_result")
            found = budget.found(output, {e: texts.get(e, "") for e in set(evidence)})
            rows.append({"category": _category_name(qa.get("category")),
                         **{f"in {b} tokens": v for b, v in found.items()}})
        agent.close()
    return rows


def _mean(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows)}
    for b in BUDGETS:
        values = [r[f"in {b} tokens"] for r in rows]
        out[f"in {b} tokens"] = round(sum(values) / len(values), 4) if values else None
    return out


def _by_category(rows: list[dict[str, Any]]) -> dict[str, Any]:
    names = sorted({r["category"] for r in rows})
    return {n: _mean([r for r in rows if r["category"] == n]) for n in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memgpt_lite.lab.locomo_chat")
    parser.add_argument("file")
    parser.add_argument("--samples", type=int, help="only the first N conversations")
    parser.add_argument("--layout", type=int, choices=sorted(recall_page.PER_PAGE),
                        help=f"search layout (default {recall_page.LAYOUT})")
    parser.add_argument("--variant", choices=list(VARIANTS), metavar="NAME",
                        help="a variant of retrieval_levers (its layout and constants) instead "
                             "of --layout")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    layout, values = VARIANTS[args.variant] if args.variant else (args.layout, {})
    with overridden(values):
        data = run(args.file, args.samples, layout)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2), "utf-8")
    for name, m in [*data["by_category"].items(), ("categories 1-4", data["categories 1-4"])]:
        print(f"{name:16} n={m['n']:5} " + " ".join(f"in {b}: {m[f'in {b} tokens']:.3f}"
                                                  for b in BUDGETS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
