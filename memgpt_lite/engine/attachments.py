"""Files sent with a message (`chat -a FILE`, piped stdin with `-p`, `/add FILE`).

A text file becomes a text block of the user message, wrapped in an `<attachment>` tag that
names it; PNG, JPEG, GIF and WebP images become image blocks (base64), checked as the API
checks them (media type by content, size, dimensions). What is stored in recall is the whole
text; what the context holds (the request and the queue) is at most TEXT_SHOWN_CHARS of each
text attachment, then a visible marker. Why recall and not archival: the file is part of
what the user said, so it lives where every message lives — kept whole, found by
`conversation_search` (whose hit shows the part around the words searched for), undone with
the turn by `/pop`, removed by `forget`, exported with the agent — and archival memory stays
what the model chose to keep. The clipped copy is made again from the stored message each
time (`context_content`), so a retried or replayed turn sends the same bytes.
"""

from __future__ import annotations

import base64
import re
import struct
from dataclasses import dataclass
from typing import Any

MAX_FILE_BYTES = 20_000_000  # read at most this much of one file
TEXT_SHOWN_CHARS = 20_000  # of each text attachment in the context
MAX_IMAGE_BASE64 = 5 * 1024 * 1024  # the API's limit on an image's base64 data
MAX_IMAGE_SIDE = 8_000  # pixels, either side (the API's limit)
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_HEADER = re.compile(r'<attachment name="(?P<name>[^"\n]*)" chars="(?P<chars>\d+)">\n')
CLIP_MARKER = ("\n[attachment clipped to fit the context: {cut:,} of {total:,} chars not shown. "
               "The whole file is stored in recall: conversation_search with words from the "
               "part you need shows that part.]")

# The structure of a text attachment, which no forget may find words in ("name", "chars",
# "attachment", the clip marker's "the whole file"): the tag around the file and its name's
# quotes, and the clip marker (see `structure_spans`).
_STRUCTURE = re.compile(
    r'<attachment name="|" chars="\d+">\n|\n</attachment>|'
    + re.escape(CLIP_MARKER.format(cut=0, total=0)).replace("0", r"[\d,]+"))


class AttachmentError(ValueError):
    """A file that cannot be attached; the message is one sentence for the user."""


@dataclass
class Attachment:
    """One file to send: a text (decoded as its byte-order mark says, else as UTF-8, with
    U+FFFD for a few bad bytes) or an image (base64 data of a supported media type, with
    its size in pixels)."""

    name: str
    kind: str  # "text" | "image"
    size: int  # bytes of the file
    text: str = ""
    media_type: str = "text/plain"
    data: str = ""
    width: int = 0
    height: int = 0

    def block(self) -> dict[str, Any]:
        """The content block sent (and stored) for it."""
        if self.kind == "image":
            return {"type": "image", "source": {"type": "base64", "media_type": self.media_type,
                                                "data": self.data}}
        return {"type": "text", "text": text_block(self.name, self.text)}

    def describe(self) -> str:
        if self.kind == "image":
            return (f"{self.name} ({self.media_type}, {self.width:,}×{self.height:,} px, "
                    f"{_size(self.size)})")
        clipped = (f"; the context shows the first {TEXT_SHOWN_CHARS:,}, recall keeps it all"
                   if len(self.text) > TEXT_SHOWN_CHARS else "")
        return f"{self.name} ({len(self.text):,} chars{clipped})"


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB" if n >= 1e3 else f"{n} B"


def text_block(name: str, text: str) -> str:
    safe = re.sub(r'["\n\r<>]', "_", name)[:200]
    return f'<attachment name="{safe}" chars="{len(text)}">\n{text}\n</attachment>'


def from_bytes(name: str, data: bytes) -> Attachment:
    """The attachment for a file's bytes (AttachmentError when it can be neither)."""
    media = sniff_image(data)
    if media is not None:
        return _image(name, data, media)
    bom, encoding = next(((m, e) for m, e in _BOMS if data.startswith(m)), (b"", "utf-8"))
    if not bom and b"\0" in data[:8192]:
        raise AttachmentError(f"{name} is neither text nor a PNG, JPEG, GIF or WebP image; "
                              "memgpt-lite cannot attach it.")
    text = data[len(bom):].decode(encoding, errors="replace").replace("\r\n", "\n")
    if not text.strip():
        raise AttachmentError(f"{name} is empty; there is nothing to attach.")
    bad = text.count("\ufffd") - data.count("\ufffd".encode(encoding))
    if bad > max(MAX_BAD_CHARS, len(text) * MAX_BAD_SHARE):
        raise AttachmentError(f"{name} is not UTF-8 text ({bad:,} of its {len(text):,} "
                              "characters cannot be read: another encoding, such as GBK or "
                              "Latin-1?); save it as UTF-8 and attach it again.")
    return Attachment(name, "text", len(data), text=text)


# A byte-order mark says how a text file is encoded (Windows tools write UTF-16 with one);
# UTF-32's comes first, as it begins with UTF-16's.
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\0\0", "utf-32-le"),
         (b"\0\0\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
# A text with more bad bytes than this is in another encoding: sent, it would be a page of
# U+FFFD the model cannot read, the tokens paid all the same. Fewer (a stray byte in a log)
# become U+FFFD, the one rule for text.
MAX_BAD_SHARE = 0.10
MAX_BAD_CHARS = 16


def _image(name: str, data: bytes, media: str) -> Attachment:
    encoded = base64.b64encode(data).decode("ascii")
    if len(encoded) > MAX_IMAGE_BASE64:
        raise AttachmentError(f"{name} is too large to send: {len(encoded):,} bytes of base64, "
                              f"the API takes at most {MAX_IMAGE_BASE64:,} per image (about "
                              f"{MAX_IMAGE_BASE64 * 3 // 4 // 1_000_000} MB of file); make it "
                              "smaller first.")
    size = image_size(data, media)
    if size is None:
        raise AttachmentError(f"{name} looks like {media} but its header cannot be read; it "
                              "may be damaged.")
    if max(size) > MAX_IMAGE_SIDE:
        raise AttachmentError(f"{name} is {size[0]:,}×{size[1]:,} px; the API takes images of "
                              f"at most {MAX_IMAGE_SIDE:,} px a side.")
    return Attachment(name, "image", len(data), media_type=media, data=encoded,
                      width=size[0], height=size[1])


def sniff_image(data: bytes) -> str | None:
    """The media type an image's first bytes say it is (None: not one the API takes)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes, media: str) -> tuple[int, int] | None:
    """(width, height) in pixels from the image's header, or None when it is unreadable."""
    try:
        return _SIZES[media](data)
    except (struct.error, IndexError, ValueError):
        return None


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def _gif_size(data: bytes) -> tuple[int, int]:
    return struct.unpack("<HH", data[6:10])


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The frame size from the first start-of-frame marker (SOF0–SOF15 but DHT, JPG, DAC)."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill bytes before a marker
            i += 1
            continue
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        return (int.from_bytes(data[24:27], "little") + 1,
                int.from_bytes(data[27:30], "little") + 1)
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


_SIZES = {"image/png": _png_size, "image/gif": _gif_size, "image/jpeg": _jpeg_size,
          "image/webp": _webp_size}


# --------------------------------------------------------------------------- in the context


def context_content(content: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """What the context holds of a stored user message with attachments: each text
    attachment cut to TEXT_SHOWN_CHARS with a marker (None: nothing needs cutting). The
    user's own words are the message's last block and are never cut here."""
    out, cut = [], False
    for i, block in enumerate(content):
        clipped = _clipped(block) if i < len(content) - 1 else None
        out.append(block if clipped is None else {**block, "text": clipped})
        cut = cut or clipped is not None
    return out if cut else None


def _clipped(block: dict[str, Any]) -> str | None:
    text = block.get("text")
    if block.get("type") != "text" or not isinstance(text, str):
        return None
    head = _HEADER.match(text)
    if head is None or not text.endswith("\n</attachment>"):
        return None
    body = text[head.end():-len("\n</attachment>")]
    if len(body) <= TEXT_SHOWN_CHARS:
        return None
    marker = CLIP_MARKER.format(cut=len(body) - TEXT_SHOWN_CHARS, total=len(body))
    return text[:head.end()] + body[:TEXT_SHOWN_CHARS] + marker + "\n</attachment>"


def structure_spans(text: str) -> list[tuple[int, int]]:
    """Where the tag and clip marker of a text attachment are in `text` (a forget matches
    the file's name and text, never these)."""
    return [m.span() for m in _STRUCTURE.finditer(text)] if "attachment" in text else []


def is_attachment(block: dict[str, Any]) -> bool:
    """A text block that holds an attached file, or an image block."""
    if block.get("type") == "image":
        return True
    text = block.get("text")
    return block.get("type") == "text" and isinstance(text, str) and bool(_HEADER.match(text))


def image_tokens(block: dict[str, Any]) -> int:
    """About how many tokens the API counts for an image block: its pixels / 750, after it
    scales the long side down to 1,568 px (at most about 1,600 tokens); 1,600 when the
    size cannot be read. What the token counter adds for an image instead of its base64."""
    source = block.get("source") or {}
    try:
        # The header is near the start (a JPEG's frame size may follow 64 kB of metadata).
        raw = base64.b64decode(str(source.get("data", ""))[:131_072])
    except ValueError:
        return 1_600
    size = image_size(raw, str(source.get("media_type")))
    if not size or not all(size):
        return 1_600
    width, height = size
    scale = min(1.0, 1_568 / max(width, height))
    return max(1, min(1_600, round(width * scale * height * scale / 750)))
