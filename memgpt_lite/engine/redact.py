"""Redaction of obvious secrets before anything is stored, sent or recorded.

A memory agent keeps every message forever and searches it later, so a pasted API key would
otherwise live on in recall, in archival passages, in recordings and in every request that
quotes it. Each secret is replaced by a visible marker such as `[redacted: anthropic key]`,
so the user and the model both see that something was there.

The patterns aim at secrets with a recognisable shape (provider key prefixes, PEM and
OpenPGP private key blocks, `Bearer` headers, `api_key=...` assignments, Luhn-valid card
numbers with a card-network prefix, a bare 40-character AWS secret key that reads as random).
Look-alikes survive: ordinary long numbers, `task-list`, `max_tokens=2048`, hashes, CamelCase
identifiers. A key wrapped over several lines, or piped over several messages, is one secret:
the lines that continue it are redacted with it. `redact` is idempotent: markers are never
redacted again, so replaying a recording that holds redacted text reproduces the same
requests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MARKER = "[redacted: {what}]"
_NOT_MARKER = r"(?!\[redacted)"


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# Issuer prefixes of the big card networks (Visa, Mastercard, Amex, Discover, JCB, Diners,
# UnionPay): a Luhn check alone would pass one in ten random numbers.
_CARD_PREFIX = re.compile(r"4|5[1-5]|2[2-7]|3[47]|6011|64[4-9]|65|35|30[0-5]|36|38|62")


def _card(match: re.Match[str]) -> str | None:
    digits = re.sub(r"[ .-]", "", match.group())
    if not 13 <= len(digits) <= 19 or not _CARD_PREFIX.match(digits) or not _luhn_ok(digits):
        return None
    return MARKER.format(what=f"card number ending {digits[-4:]}")


_PLACEHOLDER = re.compile(r"[$<{%]|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")


def _assignment(match: re.Match[str]) -> str | None:
    value = match.group("value")
    if value.isdigit() or len(set(value)) < 4 or _PLACEHOLDER.match(value):
        return None  # counters, ids, "xxxxxxxx", YOUR_TOKEN, $API_KEY, <token>
    # The closing quote (if any) is not part of the match and stays in place.
    return match.group("name") + match.group("sep") + match.group("q") + MARKER.format(
        what="secret")


def _fixed(what: str) -> Callable[[re.Match[str]], str]:
    return lambda match: MARKER.format(what=what)


def _bearer(match: re.Match[str]) -> str | None:
    token = match.group("token")
    if not (re.search(r"\d", token) and re.search(r"[A-Za-z]", token)):
        return None  # "Bearer of bad news", "bearer authentication"
    return match.group("scheme") + " " + MARKER.format(what="bearer token")


def _aws_secret(match: re.Match[str]) -> str | None:
    """A bare AWS secret access key: 40 base64 characters of 30 random bytes. Hex (a git
    SHA) and identifiers made of words (CamelCase) are left alone."""
    value = match.group()
    if not (re.search(r"[A-Z]", value) and re.search(r"[a-z]", value)
            and re.search(r"\d[A-Za-z/+]", value)):
        return None  # hex is never mixed-case; a random key has a digit inside
    # A random key's letters rarely form words: in 50,000 random keys, a quarter of the
    # characters sit in runs like `Word` or `word` (the median), 60% in under 2%.
    # CamelCase identifiers are 75-95% words.
    if sum(len(w) for w in _WORDLIKE.findall(value)) >= 0.6 * len(value):
        return None
    return MARKER.format(what="aws secret key")


_WORDLIKE = re.compile(r"[A-Z]?[a-z]{3,}|[A-Z]{2,}[a-z]{2,}")

_SECRET_WORDS = (r"api[_-]?key|apikey|secret|token|passwd|password|pwd|access[_-]?key|"
                 r"private[_-]?key|client[_-]?secret|credential")

# Order matters: specific shapes first, so `api_key=sk-ant-...` says "anthropic key".
RULES: list[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str | None]]] = [
    ("private key", re.compile(
        r"-----BEGIN (?P<label>[A-Z0-9 ]*?)PRIVATE KEY(?P<block>(?: BLOCK)?)-----"
        r"(?:.*?-----END (?P=label)PRIVATE KEY(?P=block)-----|.*\Z)", re.S),
     _fixed("private key")),
    ("anthropic key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{16,}"), _fixed("anthropic key")),
    ("stripe key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"), _fixed("stripe key")),
    ("api key", re.compile(r"\bsk-(?:proj-|svcacct-|live-)?[A-Za-z0-9_-]{20,}"),
     _fixed("api key")),
    ("aws access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), _fixed("aws access key")),
    ("github token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
     _fixed("github token")),
    ("slack token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}"), _fixed("slack token")),
    ("google api key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), _fixed("google api key")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
     _fixed("token")),
    ("bearer token", re.compile(
        rf"\b(?P<scheme>[Bb]earer|BEARER)\s+{_NOT_MARKER}(?P<token>[A-Za-z0-9._~+/-]{{16,}}=*)"),
     _bearer),
    ("secret", re.compile(
        rf"(?P<name>\b[\w.-]*?(?i:{_SECRET_WORDS})[\w.-]*)"
        rf"(?P<sep>[\"']?\s*[:=]\s*)(?P<q>[\"']?){_NOT_MARKER}"
        r"(?P<value>[^\s\"'`,;)\]}]{8,})"), _assignment),
    # After the assignments, so that `aws_secret_access_key = …` says "secret".
    ("aws secret key", re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
     _aws_secret),
    # Digits run together or grouped by spaces or dashes; with dots only in groups of four
    # (4111.1111.1111.1111), so that decimals such as 2.718281828459045 are left alone.
    ("card number", re.compile(r"(?<![\d.-])(?:\d(?:[ -]?\d){12,18}|\d{4}(?:\.\d{4}){3}"
                               r"(?:\.\d{3})?)(?![\d-]|\.\d)"), _card),
]


def redact(text: str) -> str:
    """`text` with every recognised secret replaced by a visible marker (a key wrapped over
    several lines is one marker)."""
    if not text:
        return text
    for _kind, pattern, replace in RULES:
        def substitute(match: re.Match[str]) -> str:
            marker = replace(match)
            return match.group() if marker is None else marker

        text = pattern.sub(substitute, text)
    return _wrapped_keys(text)


# The secrets a line break can cut in two: a token of one word. (A private key has a frame
# of its own; a card number is grouped, never wrapped.)
_CONTINUED = ("anthropic key", "stripe key", "api key", "aws access key", "aws secret key",
              "github token", "slack token", "google api key", "token", "bearer token", "secret")
_ENDS_IN_SECRET = re.compile(r"\[redacted: (" + "|".join(map(re.escape, _CONTINUED)) + r")\]$")
_TOKEN_PIECE = re.compile(r"[A-Za-z0-9_\-+/.~]+={0,2}")
_ALL_CAPS_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")


def _continues(line: str, kind: str) -> bool:
    """Whether `line`, right after a `kind` secret that ended its line, is the rest of it.

    A token's rest is one word of a token's characters that reads as random: a digit, a
    capital inside, or `_+/=` (`thanks`, `ok`, `example.com`, `DEBUG=true`, `NEXT_VAR`
    are not), or long. A marker of the same kind is such a rest already redacted."""
    word = line.strip()
    if word == MARKER.format(what=kind):
        return True
    if not _TOKEN_PIECE.fullmatch(word) or _ALL_CAPS_NAME.fullmatch(word):
        return False
    return (len(word) >= 20 or re.search(r"\d|[+/=_]", word) is not None
            or (len(word) >= 4 and re.search(r".[A-Z]", word) is not None
                and re.search(r"[a-z]", word) is not None))


def _wrapped_keys(text: str) -> str:
    """Lines that continue a secret which ended the line before are dropped into its
    marker."""
    if "[redacted: " not in text or "\n" not in text:
        return text
    out: list[str] = []
    kind = None
    for line in text.splitlines(keepends=True):
        if kind is not None and _continues(line, kind):
            if not line.endswith("\n"):  # the text ended inside the secret: so does the marker
                out[-1] = out[-1].rstrip("\r\n")
            continue
        body = line.rstrip()
        found = _ENDS_IN_SECRET.search(body)
        kind = found.group(1) if found else None
        out.append(line)
    return "".join(out)


# PEM's frame (`-----BEGIN RSA PRIVATE KEY-----`), or OpenPGP's armour, which `gpg --armor
# --export-secret-keys` writes (`-----BEGIN PGP PRIVATE KEY BLOCK-----`).
_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*?PRIVATE KEY(?: BLOCK)?-----")
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*?PRIVATE KEY(?: BLOCK)?-----")
# A line that can sit inside a key's frame: base64 (the last line may be short, then it is
# padded or followed by END), OpenPGP's checksum (`=` and four characters), a header
# (Proc-Type: …, Version: …) or nothing.
_KEY_BODY = re.compile(r"[A-Za-z0-9+/=]{8,}|[A-Za-z0-9+/]*={1,2}|=[A-Za-z0-9+/]{4}"
                       r"|[A-Za-z-]+: .*|")


def redact_message(text: str, in_key: str | bool = False) -> tuple[str, str | None]:
    """`redact` for one message of a conversation, and what it leaves open for the next.

    A secret piped line by line arrives as several messages: a private key's BEGIN line
    without its END, or a token cut at the end of the message. `in_key` (what the previous
    message left: the kind of that secret, or a false value) makes the lines of this message
    that continue it part of the same secret: a private key's body and END lines up to a
    line no key holds, a token's rest (see `_continues`)."""
    head = ""
    if in_key == "private key" or in_key is True:
        head, text, in_key = _key_continued(text)
        if in_key:
            return head, "private key"
    elif in_key:
        head, text, still = _token_continued(text, str(in_key))
        if still:
            return head, str(in_key)
    begin = None
    for begin in _KEY_BEGIN.finditer(text):
        pass
    if begin is not None and _KEY_END.search(text, begin.end()) is None:
        return head + redact(text), "private key"
    out = redact(text)
    cut = _ENDS_IN_SECRET.search(out.rstrip())
    return head + out, cut.group(1) if cut else None


def _token_continued(text: str, kind: str) -> tuple[str, str, bool]:
    """(marker for the lines at the start of `text` that continue a `kind` token, the text
    after them, whether every line did)."""
    marker, pos = MARKER.format(what=kind), 0
    for line in text.splitlines(keepends=True):
        if not _continues(line, kind):
            return (marker + "\n" if pos else ""), text[pos:], False
        pos += len(line)
    return marker, "", True


def _key_continued(text: str) -> tuple[str, str, bool]:
    """(marker for the key lines at the start of `text`, the text after them, whether the
    key goes on past this message)."""
    marker, pos = MARKER.format(what="private key"), 0
    for line in text.splitlines(keepends=True):
        end = _KEY_END.search(line)
        if end is not None:
            return marker, text[pos + end.end():], False
        if not _KEY_BODY.fullmatch(line.strip()):
            return (marker + "\n" if pos else ""), text[pos:], False
        pos += len(line)
    return marker, "", True


def redact_value(value: Any) -> Any:
    """Redact every string inside a JSON-like value (dicts, lists); keys are kept."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    return value


def redact_blocks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content blocks with secrets redacted in text, tool inputs and tool results. Thinking
    blocks are left alone: their signature covers the exact text, and they are not searched."""
    out = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            block = {**block, "text": redact(block.get("text", ""))}
        elif kind == "tool_use":
            block = {**block, "input": redact_value(block.get("input"))}
        elif kind == "tool_result":
            block = {**block, "content": redact_value(block.get("content"))}
        out.append(block)
    return out
