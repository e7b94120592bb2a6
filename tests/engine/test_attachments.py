"""Files sent with a message: text whole in recall and clipped in the context with a marker,
found again by conversation_search around the words asked for; images as image blocks,
checked as the API checks them (by the strict rules and the fake server alike), counted by
their pixels, not their bytes; a recorded session with attachments replays exactly."""

from __future__ import annotations

import base64
import os
import struct
import zlib
from datetime import datetime, timezone

import pytest

from memgpt_lite.engine import attachments, recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.api_rules import validate_request
from memgpt_lite.engine.attachments import AttachmentError, from_bytes
from memgpt_lite.engine.model import AnthropicClient
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.tokens import TokenCounter
from memgpt_lite.lab.fake_server import FakeAnthropicServer, count_tokens
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response

FIXED = datetime(2026, 11, 29, 13, 45, tzinfo=timezone.utc)


def png(width: int = 2, height: int = 3, noise: bool = False) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    row = (lambda: os.urandom(3 * width)) if noise else (lambda: b"\x00\x00\x00" * width)
    raw = b"".join(b"\0" + row() for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                               0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def jpeg(width: int = 640, height: int = 480) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


def gif(width: int = 5, height: int = 7) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\0\0\0;"


def webp(width: int = 9, height: int = 4) -> bytes:
    body = b"VP8X" + struct.pack("<I", 10) + b"\0\0\0\0" + (width - 1).to_bytes(3, "little") \
        + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


@pytest.fixture
def store(tmp_path):
    with SQLiteStore(tmp_path / "a.db") as s:
        yield s


def test_each_image_type_is_read_with_its_size():
    for data, media, size in ((png(2, 3), "image/png", (2, 3)),
                              (jpeg(640, 480), "image/jpeg", (640, 480)),
                              (gif(5, 7), "image/gif", (5, 7)),
                              (webp(9, 4), "image/webp", (9, 4))):
        item = from_bytes("x", data)
        assert (item.kind, item.media_type, (item.width, item.height)) == ("image", media, size)
        assert base64.b64decode(item.data) == data
        assert validate_request(_body([item.block()])) is None


def test_files_that_cannot_be_sent_are_one_sentence():
    for data, words in ((b"\0\1\2binary", "neither text nor"), (b"   \n", "is empty"),
                        (png(9000, 10), "at most 8,000 px"),
                        (b"\x89PNG\r\n\x1a\n" + b"x" * 20, "cannot be read"),
                        (b"\xff\xd8\xff" + b"\0" * (4 * 1024 * 1024), "too large")):
        with pytest.raises(AttachmentError) as info:
            from_bytes("f", data)
        assert words in str(info.value) and str(info.value).endswith(".")


def _body(content):
    return {"model": "m", "max_tokens": 10,
            "messages": [{"role": "user", "content": [*content, {"type": "text", "text": "?"}]}]}


def test_the_rules_refuse_images_the_api_refuses():
    good = from_bytes("p", png()).block()

    def with_source(**changes):
        return [{"type": "image", "source": {**good["source"], **changes}}]

    cases = [
        (with_source(media_type="image/bmp"), "media_type: Input should be 'image/jpeg'"),
        (with_source(media_type="image/jpeg"), "Image does not match the provided media type "
                                               "image/jpeg"),
        (with_source(data="not base64!"), "not valid base64"),
        (with_source(data="A" * (5 * 1024 * 1024 + 4)), "image exceeds 5 MB maximum"),
        (with_source(extra=1), "extra: Extra inputs are not permitted"),
        ([from_bytes("big", png(10, 10)).block() | {"source": {
            **good["source"], "data": base64.b64encode(png(8001, 2)).decode()}}],
         "exceed max allowed size: 8000 pixels"),
        ([{"type": "image"}], "source: Field required"),
    ]
    for content, words in cases:
        problem = validate_request(_body(content))
        assert problem and words in problem, (words, problem)
        assert problem.startswith("messages.0.content.0")
    assert "too many images" in validate_request(_body([good] * 101))
    body = _body([good])
    body["messages"] = [{"role": "user", "content": "hi"},
                        {"role": "assistant", "content": [good]}]
    assert "not allowed in assistant messages" in validate_request(body)


def test_an_image_costs_its_pixels_not_its_bytes():
    small, big = from_bytes("s", png(100, 100)).block(), from_bytes("b", png(3000, 2000)).block()
    assert attachments.image_tokens(small) == 13  # 10,000 px / 750
    assert attachments.image_tokens(big) == 1_600  # scaled to 1,568 px on the long side
    noisy = from_bytes("n", png(600, 600, noise=True)).block()
    assert len(noisy["source"]["data"]) > 1_000_000  # a megabyte of base64 ...
    assert TokenCounter().estimate_json([noisy]) < 2_000  # ... counted as ~1,600 tokens
    assert count_tokens(_body([noisy])) < 1_700  # the fake server counts alike


def test_text_is_whole_in_recall_and_clipped_in_the_context(store):
    tail = "The launch code word is zanzibar-7."
    text = "filler line\n" * 3_000 + tail  # ~36,000 chars: over what the context shows
    model = ScriptedModel([text_response("Summarised."), text_response("Found it.")])
    agent = Agent.open(store, "a", model_client=model, clock=lambda: FIXED)
    item = from_bytes("notes.md", text.encode())
    list(agent.step("Summarise this", attachments=[item.block()]))
    sent = model.requests[0].messages[-1]["content"]
    assert sent[-1] == {"type": "text", "text": "Summarise this"}  # your words stay last
    shown = next(b["text"] for b in sent if b.get("text", "").startswith("<attachment"))
    assert shown.startswith('<attachment name="notes.md" chars="')
    assert "[attachment clipped to fit the context: " in shown and tail not in shown
    assert len(shown) < attachments.TEXT_SHOWN_CHARS + 400
    stored = store.turn_messages(agent.id, 1)[0]
    assert tail in stored.content[0]["text"]  # recall keeps the whole file
    assert stored.context_content[0]["text"] == shown  # the queue sends the clipped copy
    assert agent.last_user_text() == "Summarise this"
    result = agent.tools.execute("conversation_search", {"query": "zanzibar launch code"})
    assert "zanzibar-7" in result.text  # the hit shows the part that was asked for
    assert "- user: … " in result.text and "turn:1 shows it whole" in result.text


def test_a_retried_attachment_sends_the_same_bytes(store):
    from memgpt_lite.engine.errors import OverloadedError

    model = ScriptedModel([OverloadedError("busy"), text_response("ok")])
    agent = Agent.open(store, "a", model_client=model, clock=lambda: FIXED)
    item = from_bytes("log.txt", ("x" * 30_000).encode())
    list(agent.step("look", attachments=[item.block()]))
    list(agent.retry())
    assert model.requests[0].messages[-1] == model.requests[1].messages[-1]
    assert model.requests[0].digest() == model.requests[1].digest()


def test_the_fake_server_takes_images_and_the_sdk_sends_them(store):
    with FakeAnthropicServer() as server:
        client = AnthropicClient(base_url=server.base_url, api_key="test", max_retries=0)
        agent = Agent.open(store, "a", model_client=client, clock=lambda: FIXED)
        image = from_bytes("cat.jpg", jpeg()).block()
        events = list(agent.step("What is this?", attachments=[image]))
        assert events[-1].completed, [e for e in events if e.kind == "error"]
        assert events[-1].text == "Fake reply to: What is this?"
        sent = server.requests[-1]["messages"][-1]["content"]
        assert any(b.get("type") == "image" for b in sent)
        bad = {**image, "source": {**image["source"], "media_type": "image/png"}}
        events = list(agent.step("and this?", attachments=[bad]))
        errors = [e.message for e in events if e.kind == "error"]
        assert errors and "does not match the provided media type" in errors[0]


def test_a_session_with_attachments_replays_exactly(store, tmp_path):
    script = [tool_response([("archival_insert", {"content": "The diagram shows a pipeline."})]),
              text_response("It shows a pipeline."), text_response("Summarised.")]
    agent = Agent.open(store, "a", model_client=ScriptedModel(script), clock=lambda: FIXED)
    recorder = recording.Recorder(tmp_path / "rec.jsonl")
    recording.record_header(agent, recorder)
    blocks = [from_bytes("d.png", png(40, 30)).block()]
    list(recording.recorded_step(agent, recorder, "What is this?", attachments=blocks))
    text = ("my key is sk-ant-api03-" + "x" * 40 + "\n") + "word " * 6_000
    list(recording.recorded_step(agent, recorder, "Summarise",
                                 attachments=[from_bytes("n.txt", text.encode()).block()]))
    recorder.close()
    raw = (tmp_path / "rec.jsonl").read_text()
    assert "sk-ant-api03-" + "x" * 40 not in raw  # a file's secret is redacted like a message's
    assert '"attachments"' in raw
    report = replay_mod.replay(tmp_path / "rec.jsonl", strict=True)
    assert report.ok and not report.divergences, report.divergences
    assert report.tally.turns == 2


def test_a_text_file_with_a_byte_order_mark_is_read_in_its_encoding():
    """Windows tools write UTF-16 with a byte-order mark (PowerShell's `>`): its zero bytes
    had it refused as 'neither text nor an image', and UTF-8's mark was kept as text."""
    text = "记忆 notes: café ☕\nline two"
    for data in (text.encode("utf-16"), b"\xfe\xff" + text.encode("utf-16-be"),
                 text.encode("utf-8-sig"), text.encode("utf-32")):
        assert from_bytes("notes.txt", data).text == text, data[:4]


def test_a_text_file_in_another_encoding_is_refused_in_one_sentence():
    """A GBK file decoded as UTF-8 was sent as a page of U+FFFD: every token paid, nothing
    the model could read, and no word to the user."""
    gbk = ("我的猫叫小白，它喜欢吃鱼。" * 40).encode("gbk")
    with pytest.raises(AttachmentError, match=r"notes.txt is not UTF-8 text .* save it as UTF-8"):
        from_bytes("notes.txt", gbk)
    log = b"a log line\n" * 50 + b"a stray \xff byte\n"  # a few bad bytes: sent, as U+FFFD
    assert "a stray \ufffd byte" in from_bytes("app.log", log).text
    kept = "a real \ufffd in UTF-8\n" * 40  # U+FFFD written in the file is no bad byte
    assert from_bytes("k.txt", kept.encode()).text == kept
