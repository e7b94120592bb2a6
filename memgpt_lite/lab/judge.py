"""The judge: one model call that grades one reply against a criterion, PASS or FAIL.

Scenario `judge` checks and LoCoMo's optional judged answers both ask it.
"""

from __future__ import annotations

from typing import Any

from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.errors import StreamError
from memgpt_lite.engine.model import final_response
from memgpt_lite.engine.records import ModelRequest
from memgpt_lite.engine.text import shorten
from memgpt_lite.lab.harness import ScenarioError

JUDGE_PROMPT = ("You grade one reply of an assistant. Say whether the reply meets the "
                "criterion. Answer with PASS or FAIL on the first line, then one sentence why.")


def ask_judge(client: Any, criterion: str, question: str, reply: str, *,
              model: str | None = None) -> str:
    """One judge call; returns 'PASS …' or 'FAIL …'."""
    text = (f"<criterion>\n{criterion}\n</criterion>\n<user_message>\n{question}\n"
            f"</user_message>\n<reply>\n{reply}\n</reply>")
    request = ModelRequest(model=model or Settings().model, max_tokens=200,
                           system=[{"type": "text", "text": JUDGE_PROMPT}],
                           messages=[{"role": "user", "content": [{"type": "text", "text": text}]}])
    try:
        response = final_response(client.stream(request))
    except StreamError:
        raise ScenarioError("the judge's stream ended without a response") from None
    answer = response.text.strip()
    head = answer.split(None, 1)[0].upper().strip(".:") if answer else ""
    return answer if head in ("PASS", "FAIL") else f"FAIL (unclear verdict: {shorten(answer, 70)!r})"

