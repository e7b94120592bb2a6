"""The room a request needs: the tools every request defines, and the least context window
an agent can work in (the fixed part of a request plus one short turn), by one rule wherever a
window enters: a chat's flags, the environment, the stored value, `agents set`, an import.
The window a provider teaches (its "prompt is too long" maximum) is learned and read here too
(see Agent._learn_window and Agent.use_model).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from memgpt_lite.engine.config import Settings, setting_names
from memgpt_lite.engine.context import ContextBuilder, ContextInputs
from memgpt_lite.engine.errors import ModelError
from memgpt_lite.engine.events import NoticeEvent
from memgpt_lite.engine.memory import render_core_memory
from memgpt_lite.engine.paging import EVICT_TURNS_SCHEMA, MIN_SUMMARY_CHARS
from memgpt_lite.engine.prompts import CONTRACT
from memgpt_lite.engine.recall_page import LAYOUT
from memgpt_lite.engine.records import Block, Message, ModelRequest
from memgpt_lite.engine.shrink import CLIP_KEEP, CLIP_MARKER
from memgpt_lite.engine.tokens import TokenCounter
from memgpt_lite.engine.tool_schemas import memory_tool_schemas

ONE_TURN_TOKENS = 500  # the least room a turn needs on top of the fixed part of a request
# What the fit never takes away, in the floor's request: a summary it no longer halves (under
# twice MIN_SUMMARY_CHARS) and a message clipped as far as it goes, marker included. Counted
# as characters of the request, they cost what the server's count says (a server counting a
# token per 1.2 characters made them outgrow ONE_TURN_TOKENS: every long turn over budget).
LEAST_SUMMARY = ("- turn 1: the user said what matters; " * 60)[:2 * MIN_SUMMARY_CHARS - 1]
LEAST_MESSAGE = ("a message clipped to fit the context " * 20)[:CLIP_KEEP] + CLIP_MARKER.format(
    cut=99_999, total=99_999 + CLIP_KEEP, how="search it with conversation_search.")

# The turn's time as the longest form tells it (a zone with an offset, and its UTC time).
LEAST_TIME = datetime(2026, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=9, minutes=30)))


def tool_schemas(layout: int = LAYOUT, contract: int = CONTRACT) -> list[dict]:
    """The tools every request defines: the memory tools (engine/tool_schemas.py) and
    evict_turns, as the search `layout` and model `contract` show them."""
    return memory_tool_schemas(layout, contract) + [EVICT_TURNS_SCHEMA]


def request_floor(settings: Settings, blocks: list[Block], counter_state: object = None,
                  count: Callable[[ModelRequest], int] | None = None) -> int:
    """The tokens a turn needs at the least: the real request built with an empty queue
    (tools, system prompt, these core memory blocks, the least summary and message the fit
    leaves) plus one short turn, as the agent's counter (from its stored state; else the
    cautious default) estimates it, or as `count` (the API's count_tokens) counts it exactly."""
    counter = TokenCounter.from_state(counter_state)
    current = [Message("user", [{"type": "text", "text": LEAST_MESSAGE}], 1)]
    inputs = ContextInputs(LEAST_SUMMARY, [], current, render_core_memory(blocks),
                           now=LEAST_TIME)
    built = ContextBuilder(settings, tool_schemas(), counter).build(inputs)
    measured = built.estimated_tokens if count is None else count(built.request)
    return measured + ONE_TURN_TOKENS


# Below this many times the estimated minimum, a window is measured exactly (one free
# count_tokens call): a server may count a third more than the estimate, and far above the
# minimum the estimate's error cannot matter (so a chat's start waits for no call).
EXACT_BELOW = 1.5


def window_floor(settings: Settings, blocks: list[Block], counter_state: object = None,
                 count: Callable[[ModelRequest], int] | None = None) -> int:
    """`request_floor` as every check of a context window uses it (a chat's flags, the
    environment, the stored value, `agents set`, an import): measured by `count` when one
    is at hand and the window is near the minimum, else the calibrated estimate. A server
    that cannot be asked leaves the estimate."""
    floor = request_floor(settings, blocks, counter_state)
    near = settings.context_window < EXACT_BELOW * (
        floor + settings.max_output_tokens + settings.safety_margin)
    if count is None or not near:
        return floor
    try:
        return request_floor(settings, blocks, counter_state, count)
    except ModelError:
        return floor


def window_for(state: object, model: str) -> int | None:
    """The window a provider taught the agent for `model` (see Agent._learn_window)."""
    if isinstance(state, dict) and state.get("model") == model:
        tokens = state.get("tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            return tokens
    return None


def learn_window(settings: Settings, maximum: int | None) -> NoticeEvent | None:
    """The provider refused a prompt for being over `maximum` tokens, less than the context
    window: the window shrinks to it (the budget with it), in `settings`, never below what
    leaves a budget at all. The notice to give, or None when the window already fits."""
    s = settings
    if not maximum or maximum >= s.context_window:
        return None
    before = s.context_window
    s.context_window = max(maximum, s.max_output_tokens + s.safety_margin + 1)
    return NoticeEvent(
        f"The provider takes at most {maximum:,} tokens per request, less than the context "
        f"window of {before:,} ({setting_names('context_window')}): this agent now works "
        f"within {s.context_window:,} on {s.model}, a budget of {s.budget:,} tokens.",
        "warning")
