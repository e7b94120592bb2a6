"""Model-call failures as the engine sees them: one class per kind of failure, each carrying
one sentence for the user. `model.AnthropicClient` maps every SDK error onto these."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memgpt_lite.engine.records import Usage


class ModelError(Exception):
    """A model call failed. `message` is one sentence for the user; `retryable` says whether
    trying the same turn again later can help. `billed`: what the API had reported using
    when a call failed after its stream began (the input is paid for all the same)."""

    kind = "model_error"
    retryable = True
    billed: Usage | None = None

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.status = status


class AuthError(ModelError):
    kind, retryable = "auth", False


class RateLimitError(ModelError):
    kind = "rate_limit"


class OverloadedError(ModelError):
    kind = "overloaded"


class APIConnectionError(ModelError):
    kind = "connection"


class StreamError(ModelError):
    kind = "stream"


class BadRequestError(ModelError):
    kind, retryable = "bad_request", False


class PromptTooLongError(BadRequestError):
    """The provider said the prompt is too long; carries its numbers when it gave them."""

    kind = "prompt_too_long"

    def __init__(self, message: str, *, actual: int | None = None, maximum: int | None = None,
                 status: int | None = 400):
        super().__init__(message, status=status)
        self.actual = actual
        self.maximum = maximum
