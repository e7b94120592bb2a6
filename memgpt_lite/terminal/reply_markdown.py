"""A reply as rendered Markdown: headings at the left margin, a link's URL after its text,
controls made visible. A module of its own because rich.markdown (with markdown-it) is the
largest import of the chat's terminal: the chat draws its first prompt without it, and it is
imported on the SDK's background thread (cli_parser) or by the first reply, whichever comes
first.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.console import JustifyMethod
from rich.markdown import Heading, Markdown

from memgpt_lite.terminal.render import visible


class _LeftHeading(Heading):
    """A heading at the left margin: a reply is read top to bottom, and a centred heading
    (rich's default for `#`) floats away from the text it heads."""

    LEVEL_ALIGN: ClassVar[dict[str, JustifyMethod]] = dict.fromkeys(
        ("h1", "h2", "h3", "h4", "h5", "h6"), "left")


class _Markdown(Markdown):
    elements: ClassVar[dict[str, type[Any]]] = {**Markdown.elements,
                                                "heading_open": _LeftHeading}


def markdown(text: str) -> Markdown:
    """A reply (or replayed reply) as rendered Markdown, controls made visible."""
    # hyperlinks=False: a link shows its URL after its text; as a terminal hyperlink the URL
    # is lost wherever the terminal (or a log of it) does not support them.
    return _Markdown(visible(text), hyperlinks=False)
