"""Usage-anchored token counting.

There is no local Claude tokenizer, so the truth is each response's `usage`. The counter
remembers the last request's size and its true token total, and estimates a new request as
that anchor plus the size added since, at a conservative size-per-token ratio. Every new
`usage` (and every "prompt is too long" error) recalibrates the ratio, so a server that counts
tokens its own way is learned after one call.

A request's size is its canonical JSON weighed by the counting rule (`RULE`, stored with what
the counter learned and in every recording's header, so that a replay weighs as its session
did):
  1  characters (recordings and agents from before rules were named): a CJK character or an
     emoji weighed one, though a byte-level tokenizer counts it as three or four bytes, so a
     first CJK paste was estimated at a third of its size;
  2  UTF-8 bytes: ASCII (English, code, JSON, base64) weighs exactly as under rule 1; accented
     Latin 2, CJK 3, emoji 4 — never under a tokenizer that counts bytes (the fake server's
     `--per-byte`), and within 0.5% of rule 1 on an English session.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass

from memgpt_lite.engine.records import ModelRequest, Usage, canonical_json
from memgpt_lite.engine.setting_rules import (  # noqa: F401 - part of this module's API
    KNOWN_MODELS,
    ConfigError,
    resolve_model,
)
from memgpt_lite.engine.text import quoted

RULE = 2  # the counting rule of new agents and recordings (see the module docstring)
RULES = (1, 2)  # every rule a replay can weigh by
# Claude averages ~3.5 chars/token on English prose and fewer on JSON, code and CJK; start
# low so that the first requests are overestimated rather than under.
DEFAULT_CHARS_PER_TOKEN = 2.5
MIN_CHARS_PER_TOKEN = 0.8
MAX_CHARS_PER_TOKEN = 6.0
# Estimates of added text are inflated by this much: a miss costs an overflow retry, an
# overestimate costs only an earlier eviction.
SAFETY_FACTOR = 1.1


IMAGE_MARK = '"type":"image"'


def text_size(text: str, rule: int = RULE) -> int:
    """What `text` weighs under counting rule `rule`: characters (1) or UTF-8 bytes (2)."""
    if rule == 1 or text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def request_chars(request: ModelRequest, rule: int = RULE) -> int:
    """The request's size as the counter sees it under `rule` (see `counted_chars`)."""
    sizes = request._sizes = request._sizes or {}
    if rule not in sizes:
        sizes[rule] = counted_chars(None, request.canonical(), request.messages, rule)
    return sizes[rule]


def counted_chars(value: object, text: str | None = None, within: object = None,
                  rule: int = RULE) -> int:
    """The size of `value`'s canonical JSON (or of `text`, its JSON already made) under
    `rule`, where an image counts as the size of the tokens the API charges for it (its
    pixels, see attachments.image_tokens), not as its base64 data (ASCII: the same size
    under every rule). `within`: where the images are, when not `value` itself."""
    text = canonical_json(value) if text is None else text
    size = text_size(text, rule)
    if IMAGE_MARK not in text:
        return size
    from memgpt_lite.engine.attachments import image_tokens

    adjust = 0
    for block in _images(value if within is None else within):
        data = str((block.get("source") or {}).get("data", ""))
        adjust += round(image_tokens(block) * DEFAULT_CHARS_PER_TOKEN) - len(data)
    return max(1, size + adjust)


def _images(value: object) -> list[dict]:
    if isinstance(value, dict):
        if value.get("type") == "image":
            return [value]
        return [b for v in value.values() for b in _images(v)]
    if isinstance(value, list):
        return [b for v in value for b in _images(v)]
    return []


@dataclass
class TokenCounter:
    """Estimates request sizes in tokens, anchored on the last true `usage`. Sizes (and so
    `chars_per_token` and `anchor_chars`) are in the units of its counting `rule`."""

    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN
    anchor_chars: int = 0
    anchor_tokens: int = 0
    rule: int = RULE
    # The rule the calibration above was learned under, when not `rule` (an agent stored by
    # an older version): converted at the next request, which is measured under both.
    learned_under: int | None = None

    def size(self, value: object) -> int:
        return counted_chars(value, rule=self.rule)

    def text_size(self, text: str) -> int:
        return text_size(text, self.rule)

    def request_size(self, request: ModelRequest) -> int:
        self._convert(request)
        return request_chars(request, self.rule)

    def chars_for(self, units: int, text: str) -> int:
        """About how many characters of text like `text` weigh `units`."""
        size = self.text_size(text)
        if self.rule == 1 or not text or size == len(text):
            return units
        return int(units * len(text) / size)

    def kept_chars(self, text: str, cut: int) -> int:
        """How many leading characters of `text` are left when about `cut` of its size goes
        from its end (a character cut in two goes too)."""
        if self.rule == 1 or text.isascii():
            return len(text) - cut
        data = text.encode("utf-8", "surrogatepass")
        return len(data[:max(0, len(data) - cut)].decode("utf-8", "ignore"))

    def estimate_chars(self, chars: int) -> int:
        return math.ceil(chars / self.chars_per_token * SAFETY_FACTOR)

    def estimate_text(self, text: str) -> int:
        return self.estimate_chars(self.text_size(text))

    def estimate_json(self, value: object) -> int:
        return self.estimate_chars(self.size(value))

    def estimate_request(self, request: ModelRequest) -> int:
        return self.estimate_request_chars(self.request_size(request))

    def estimate_request_chars(self, chars: int) -> int:
        if not self.anchor_tokens:
            return self.estimate_chars(chars)
        delta = chars - self.anchor_chars
        if delta >= 0:
            return self.anchor_tokens + self.estimate_chars(delta)
        # The request shrank (eviction, fold): scale the anchor down proportionally, which
        # keeps the calibrated ratio instead of trusting the conservative one.
        return math.ceil(self.anchor_tokens * chars / max(1, self.anchor_chars))

    def chars_worth(self, chars: int, tokens: int) -> int:
        """About how much of a request's size `chars` must go for its estimate to drop by
        `tokens`: `estimate_request_chars` inverted near `chars` (at the anchor's ratio
        below it)."""
        if self.anchor_tokens and chars <= self.anchor_chars:
            return math.ceil(tokens * self.anchor_chars / self.anchor_tokens)
        return math.ceil(tokens * self.chars_per_token / SAFETY_FACTOR)

    def observe(self, request: ModelRequest, true_tokens: int) -> None:
        """Calibrate from a response's usage (input + cache writes + cache reads)."""
        chars = self.request_size(request)
        if true_tokens <= 0 or chars <= 0:
            return
        self.anchor_chars, self.anchor_tokens = chars, true_tokens
        measured = chars / true_tokens
        # Move towards the measured ratio but never above it: underestimating is the costly side.
        blended = min(measured, 0.5 * self.chars_per_token + 0.5 * measured)
        self.chars_per_token = _ratio(blended)

    def use_rule(self, rule: int) -> None:
        """Weigh by `rule` from now on (a replay: the rule of its recording); what was
        learned under another rule is converted at the next request."""
        fresh = (self.chars_per_token, self.anchor_tokens) == (DEFAULT_CHARS_PER_TOKEN, 0)
        learned = self.learned_under or self.rule
        self.rule = rule  # a fresh counter's guess holds under every rule: nothing to convert
        self.learned_under = None if learned == rule or fresh else learned

    def _convert(self, request: ModelRequest) -> None:
        """A calibration learned under another rule, carried over by the ratio of this
        request's sizes under both: the same text, so the same tokens, whatever it weighs."""
        if self.learned_under is None:
            return
        old = request_chars(request, self.learned_under)
        factor = request_chars(request, self.rule) / max(1, old)
        self.learned_under = None
        self.chars_per_token = _ratio(self.chars_per_token * factor)
        self.anchor_chars = round(self.anchor_chars * factor)

    def to_state(self) -> dict[str, float]:
        """What the counter learned, to be stored with the agent: a restart must not start
        from the uncalibrated guess (it would see the queue at about twice its size)."""
        return {"chars_per_token": self.chars_per_token, "anchor_chars": self.anchor_chars,
                "anchor_tokens": self.anchor_tokens, "rule": self.learned_under or self.rule}

    @classmethod
    def from_state(cls, state: object) -> TokenCounter:
        """A counter as `to_state` left it, weighing by `RULE` (a state without a rule was
        learned under rule 1: converted at its next request); anything unusable gives a
        fresh counter."""
        if not isinstance(state, dict):
            return cls()
        ratio, chars, tokens = (state.get(k) for k in
                                ("chars_per_token", "anchor_chars", "anchor_tokens"))
        rule = state.get("rule", 1)
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool)
                      for v in (ratio, chars, tokens))
        if not numbers or not MIN_CHARS_PER_TOKEN <= ratio <= MAX_CHARS_PER_TOKEN \
                or chars < 0 or tokens < 0 or type(rule) is not int or rule not in RULES:
            return cls()
        return cls(float(ratio), int(chars), int(tokens), RULE,
                   None if rule == RULE else rule)

    def observe_overflow(self, request: ModelRequest, actual_tokens: int | None) -> None:
        """A 'prompt is too long: N tokens' error tells the true size of a request."""
        if actual_tokens:
            self.observe(request, actual_tokens)
        else:
            # No numbers given: assume we were 25% low.
            self.chars_per_token = max(MIN_CHARS_PER_TOKEN, self.chars_per_token * 0.75)
            self.anchor_chars = self.anchor_tokens = 0


def _ratio(value: float) -> float:
    return min(MAX_CHARS_PER_TOKEN, max(MIN_CHARS_PER_TOKEN, value))


# List prices in USD per million tokens: (input, output). Cache writes cost 1.25× input,
# cache reads 0.1× input. Override with a JSON file named by MEMGPT_LITE_PRICES:
# {"model-id": [input, output], ...}. A model the table does not name has no price: its
# cost is unknown and said to be (a guess at another model's price would be a wrong figure).
PRICES: dict[str, tuple[float, float]] = {
    "claude-sonnet-5-5": (3.0, 15.0),
    "claude-haiku-5-5": (1.0, 5.0),
    "claude-opus-5-5": (5.0, 25.0),
}
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


def known_model(model: str) -> bool:
    return model in KNOWN_MODELS or price_of(model) is not None


def price_table() -> dict[str, tuple[float, float]]:
    from memgpt_lite.engine.config_file import env_value, named

    path = env_value("MEMGPT_LITE_PRICES")
    if not path:
        return dict(PRICES)
    return {**PRICES, **price_file(path, named("MEMGPT_LITE_PRICES", path))}


@functools.lru_cache(maxsize=4)
def price_file(path: str, where: str) -> dict[str, tuple[float, float]]:
    """Read once per path: costs are computed after every model call. `where` names the
    setting as the user gave it (the variable, or the config file's key)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            table = {k: (float(v[0]), float(v[1])) for k, v in json.load(fh).items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError, KeyError,
            RecursionError) as exc:
        raise ConfigError(f"{where} is not a readable JSON price table "
                          f"({_price_file_problem(exc)}).") from None
    for model, prices in table.items():
        if not all(math.isfinite(p) and 0 <= p <= MAX_PRICE for p in prices):
            raise ConfigError(f"{where}: the prices of {quoted(model, 60)} must be "
                              f"two numbers of dollars per million tokens between 0 and "
                              f"{MAX_PRICE:,}, got {list(prices)}.")
    return table


MAX_PRICE = 100_000  # dollars per million tokens: far above any model's list price


def _price_file_problem(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "it is nested too deeply"
    if isinstance(exc, (OSError, json.JSONDecodeError)):
        return str(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
    return 'it must map each model id to [input, output] dollars per million tokens, ' \
           'e.g. {"claude-sonnet-5-5": [3, 15]}'


def price_of(model: str, table: dict[str, tuple[float, float]] | None = None
             ) -> tuple[float, float] | None:
    """(input, output) dollars per million tokens of `model`, or of the model a dated
    snapshot id names (`claude-sonnet-5-5-20261001`); None when the table has neither."""
    table = table if table is not None else price_table()
    return table.get(model) or table.get(_DATED.sub("", model))


_DATED = re.compile(r"-\d{8}$")


def cost_usd(model: str, usage: Usage, table: dict[str, tuple[float, float]] | None = None) -> float:
    """What `usage` cost on `model`; 0 for a model with no price (`price_of`), which whoever
    shows a cost names as unknown (`Tally.unpriced`)."""
    inp, out = price_of(model, table) or (0.0, 0.0)
    return (usage.input_tokens * inp
            + usage.cache_creation_input_tokens * inp * CACHE_WRITE_FACTOR
            + usage.cache_read_input_tokens * inp * CACHE_READ_FACTOR
            + usage.output_tokens * out) / 1_000_000
