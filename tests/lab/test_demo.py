"""The bundled demo session: how it is made, and proof that it still replays.

The demo is real engine output driven by model responses WRITTEN BY HAND (below): the real
Agent, context builder, pager, memory tools and SQLite store ran; only the model was a
ScriptedModel. Regenerate the bundled file after an engine or prompt change with

    /work/venv/bin/python tests/lab/test_demo.py --write
"""

from __future__ import annotations

import re
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

from memgpt_lite.engine import recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.config import Settings
from memgpt_lite.engine.records import ModelRequest, ModelResponse
from memgpt_lite.terminal import commands, render

BUNDLED = Path(__file__).resolve().parents[2] / "memgpt_lite" / "data" / "demo.jsonl"
DEMO_SETTINGS = Settings(context_window=7_400, max_output_tokens=1_024, safety_margin=500)
START = datetime(2026, 3, 2, 18, 0, tzinfo=timezone.utc)
NOTE = ("The user's inputs and the model's responses were written by hand to show every "
        "part of the system in a few turns; the recording is the engine's real output.")

# Each user input, then the model's hand-written steps for that turn: ("tool", [(name, input)])
# or ("text", reply). An eviction is inserted by the responder when a pressure alert arrives.
TURNS: list[tuple[str, list[tuple[str, object]]]] = [
    ("Hi! I'm Maya Okafor, a backend engineer in Lisbon. I'm starting a side project: a "
     "birdwatching log app called Wingspan Notes.",
     [("tool", [("core_memory_replace", {"label": "human", "old_content": "Nothing is known "
                "about the user yet.", "new_content": "Name: Maya Okafor. Backend engineer in "
                "Lisbon.\nSide project: Wingspan Notes, a birdwatching log app."})]),
      ("text", "Nice to meet you, Maya! Wingspan Notes sounds lovely. What are you thinking "
               "for the stack?")]),
    ("I've decided: Go for the API and SQLite for storage, because I want one binary I can "
     "run on my Raspberry Pi 4 at home. No cloud bills for a hobby project.",
     [("tool", [("core_memory_append", {"label": "human", "content": "Stack: Go API + SQLite, "
                "one binary on her Raspberry Pi 4 (no cloud bills)."}),
                ("archival_insert", {"content": "Wingspan Notes stack decision: Go API and "
                 "SQLite, shipped as one binary on Maya's Raspberry Pi 4, to avoid cloud "
                 "costs for a hobby project.", "tags": ["wingspan", "decision"]})]),
      ("text", "Good choice: Go cross-compiles to ARM64 in one command and SQLite needs no "
               "server. I've noted the decision.")]),
    ("My sister Ines is doing the design. Her palette is called 'estuary': teal #2A9D8F as "
     "the main colour with sand #E9C46A for highlights.",
     [("tool", [("archival_insert", {"content": "Wingspan Notes design by Maya's sister Ines: "
                 "'estuary' palette, teal #2A9D8F main, sand #E9C46A highlights.",
                 "tags": ["wingspan", "design"]})]),
      ("text", "Saved Ines's 'estuary' palette. Teal and sand will look great on a map of "
               "sightings.")]),
    ("First real test is a field trip to the Tagus estuary on March 14th with the Lisbon "
     "birding club. We meet at 7:30 at the Alcochete pier, bring your own scope.",
     [("tool", [("archival_insert", {"content": "Wingspan Notes first field test: Tagus "
                 "estuary trip with the Lisbon birding club on March 14th.",
                 "tags": ["wingspan", "trip"]})]),
      ("text", "A real field test, great. The estuary in March should have flamingos and "
               "avocets, so offline logging will matter.")]),
    ("Here's my data model sketch: sightings(id, species_code, count, lat, lon, seen_at, "
     "notes, photo_id), species(code, common_name, latin_name, family), trips(id, place, "
     "date, leader), photos(id, sha256, width, height). Anything missing?",
     [("text", "It covers the core well. A few additions I'd consider: (1) a trip_id on "
               "sightings so a sighting belongs to a trip; (2) an accuracy_m column next to "
               "lat/lon, because phone GPS near water drifts; (3) a behaviour or "
               "breeding_code field, which birders like to log; (4) created_at/updated_at on "
               "every table for sync later; (5) a unique index on species.latin_name. For "
               "photos, storing the sha256 is smart: it deduplicates and makes a good file "
               "name. Keep the files on disk and only the metadata in SQLite.")]),
    ("How would you do offline sync from the phone to the Pi? The estuary has almost no "
     "signal.",
     [("text", "Keep it simple: the phone writes to its own SQLite file and keeps an "
               "append-only outbox of changes, each with a client-generated UUID and an "
               "updated_at. When the phone sees the Pi (home Wi-Fi or a Tailscale link), it "
               "POSTs the outbox in batches; the Pi applies them idempotently by UUID and "
               "answers with everything changed since the phone's last sync cursor. Conflicts "
               "are rare for a personal log, so last-writer-wins on updated_at is enough, "
               "plus a tombstone flag for deletes. Photos go last, as separate uploads keyed "
               "by sha256, so a dropped connection never blocks the sightings.")]),
    ("And for species names, is there a list I can import instead of typing them?",
     [("text", "Yes: use a published checklist such as the IOC World Bird List or the "
               "eBird/Clements taxonomy; both are downloadable as CSV. Import once into the "
               "species table with code, common name, latin name and family, and add a "
               "Portuguese common-name column for the club. Pin the checklist version in a "
               "settings row so you know which taxonomy your data uses when names change.")]),
    ("Nice. Ines also asked whether the app should have a dark mode for early mornings.",
     [("text", "A dark mode is a good idea for dawn outings: it saves battery and keeps "
               "your eyes adjusted. Derive it from the estuary palette: a deep teal "
               "background with sand accents keeps the identity.")]),
    ("Change of plan: the club moved the estuary trip to March 21st, a week later.",
     [("tool", [("archival_search", {"query": "estuary field trip date"})]),
      ("tool", [("archival_update", {"passage_id": 3, "content": "Wingspan Notes first field "
                 "test: Tagus estuary trip with the Lisbon birding club, moved to March "
                 "21st."})]),
      ("text", "Updated: the estuary trip is now on March 21st. More time to get offline "
               "logging ready.")]),
    ("Remind me, what time and where is the meet-up for the estuary trip?",
     [("tool", [("conversation_search", {"query": "meet-up estuary trip time pier"})]),
      ("text", "You meet at 7:30 at the Alcochete pier on March 21st (moved from the 14th), "
               "with the Lisbon birding club, and everyone brings their own scope.")]),
]

EVICTION_SUMMARY = ("Maya Okafor (backend engineer, Lisbon) is building Wingspan Notes, a "
                    "birdwatching log app: Go API + SQLite as one binary on her Raspberry Pi "
                    "4; her sister Ines designs it with the 'estuary' palette (teal #2A9D8F, "
                    "sand #E9C46A); first field test is the Tagus estuary trip with the "
                    "Lisbon birding club on March 14th; data model reviewed (add trip_id, "
                    "accuracy_m, timestamps for sync).")


class DemoResponder:
    """Serves the hand-written steps in order; when a pressure alert is in the request and
    nothing was evicted yet, it first evicts every listed turn but the last two."""

    def __init__(self) -> None:
        self.steps = [(turn, step) for turn, (_, steps) in enumerate(TURNS) for step in steps]
        self.evicted = False
        self.tool_ids = 0
        self.evict_turn: int | None = None

    def __call__(self, request: ModelRequest) -> ModelResponse:
        from memgpt_lite.lab.scripted import text_response, tool_response

        alert = _alert_turn_ids(request)
        if alert and not self.evicted:
            self.evicted = True
            self.evict_turn = self.steps[0][0] + 1
            return self._tool(tool_response([("evict_turns", {"turn_ids": alert[:-2],
                                                              "summary": EVICTION_SUMMARY})]))
        _, (kind, payload) = self.steps.pop(0)
        if kind == "text":
            return text_response(str(payload))
        return self._tool(tool_response(payload))  # type: ignore[arg-type]

    def _tool(self, response: ModelResponse) -> ModelResponse:
        for block in response.content:  # stable ids, whatever ran before in this process
            if block.get("type") == "tool_use":
                self.tool_ids += 1
                block["id"] = f"toolu_demo_{self.tool_ids:02d}"
        return response


def _alert_turn_ids(request: ModelRequest) -> list[int]:
    last = request.messages[-1]["content"]
    text = "\n".join(b.get("text", "") for b in last if b.get("type") == "text")
    if "Memory pressure" not in text:
        return []
    return [int(m) for m in re.findall(r"^- (\d+) · ", text, re.M)]


def build_demo(path: Path) -> DemoResponder:
    """Run the real agent on the hand-written script and record it to `path`."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore
    from memgpt_lite.lab.scripted import ScriptedModel

    responder = DemoResponder()
    model = ScriptedModel([responder] * 40)
    clock = SimpleNamespace(now=START)
    ticks = iter(i * 0.2 for i in range(100_000))
    path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp, SQLiteStore(Path(tmp) / "demo.db") as store:
        agent = Agent.open(store, "demo", model_client=model, settings=DEMO_SETTINGS,
                           clock=lambda: clock.now)
        with recording.Recorder(path, timer=lambda: next(ticks)) as rec:
            recording.record_header(agent, rec, source="hand-written", note=NOTE,
                                    created_at="2026-03-02T18:00:00Z")
            for i, (text, _) in enumerate(TURNS):
                clock.now = START + timedelta(minutes=3 * i)
                for _event in recording.recorded_step(agent, rec, text):
                    pass
    assert not responder.steps, "the script was not used up"
    return responder


# --------------------------------------------------------------------------- tests


def _console(monkeypatch) -> "object":
    import io

    from rich.console import Console

    out = io.StringIO()
    monkeypatch.setattr(render, "make_console",
                        lambda **_: Console(file=out, width=100, color_system=None,
                                            highlight=False))
    return out


def test_regenerated_demo_tells_the_whole_story(tmp_path):
    path = tmp_path / "demo.jsonl"
    responder = build_demo(path)
    rec = recording.Recording.load(path)
    kinds = [e["type"] for t in rec.turns for e in t.events]
    tools = [e["call"]["name"] for t in rec.turns for e in t.lines("tool_result")]
    assert rec.header["source"] == "hand-written"
    assert {"core_memory_replace", "core_memory_append", "archival_insert", "evict_turns",
            "conversation_search", "archival_search", "archival_update"} <= set(tools)
    update = next(r["result"] for t in rec.turns for r in t.lines("tool_result")
                  if r["call"]["name"] == "archival_update")
    assert not update.get("is_error") and "March 21st" in update["content"]
    assert "pressure_alert" in kinds and "memory_edit" in kinds
    evictions = [e for t in rec.turns for e in t.lines("eviction")]
    assert evictions and evictions[0]["by"] == "model"
    assert responder.evict_turn is not None and 4 in evictions[0]["turn_ids"]
    search = next(r["result"]["content"] for r in rec.turns[-1].lines("tool_result")
                  if r["call"]["name"] == "conversation_search")
    assert "7:30" in search and "Alcochete" in search  # found in recall after eviction
    assert "7:30" in rec.turns[-1].reply and "March 21st" in rec.turns[-1].reply


def test_bundled_demo_matches_the_generator(tmp_path):
    path = tmp_path / "demo.jsonl"
    build_demo(path)
    strip = lambda text: re.sub(r'"(version|agent_uid)":"[^"]*"', "", text)  # noqa: E731
    assert strip(BUNDLED.read_text("utf-8")) == strip(path.read_text("utf-8")), (
        "memgpt_lite/data/demo.jsonl is stale: run `python tests/lab/test_demo.py --write`")


def test_bundled_demo_replays_strictly():
    report = replay_mod.replay(commands.demo_path(), strict=True)
    assert report.divergences == [] and report.completed
    assert report.tally.model_evictions == 1 and report.tally.alerts >= 1
    assert "Maya Okafor" in report.final_core_memory["human"]


def test_demo_command_runs_offline_and_ends_with_core_memory(monkeypatch):
    out = _console(monkeypatch)
    code = commands.cmd_demo(SimpleNamespace(speed=0))
    text = " ".join(out.getvalue().replace("│", " ").split())  # panels wrap lines
    assert code == 0, text
    assert "WRITTEN BY HAND" in text and "not recorded from a live model" in text
    assert "memory pressure" in text and "evicted by the model" in text
    assert "7:30" in text
    tail = text[text.index("final core memory"):]
    assert "human" in tail and "Maya Okafor" in tail and "Raspberry Pi 4" in tail


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/lab/test_demo.py --write   (regenerates the bundled demo)")
    build_demo(BUNDLED)
    print(f"wrote {BUNDLED}")


def test_a_recording_made_before_search_layouts_replays_strictly():
    # The bundled demo as it was recorded with search layout 1 (no "search_layout" in its
    # header): its conversation_search results are recomputed in that layout, so every
    # request matches the recorded digests.
    old = Path(__file__).resolve().parent / "data" / "demo_search_layout1.jsonl"
    assert '"search_layout"' not in old.read_text("utf-8").splitlines()[0]
    report = replay_mod.replay(old, strict=True)
    assert report.divergences == [] and report.completed


def test_a_recording_made_with_search_layout_2_replays_strictly():
    # The bundled demo as it was recorded with search layout 2: its header names the layout,
    # so its conversation_search results are recomputed in it, not in the current one.
    old = Path(__file__).resolve().parent / "data" / "demo_search_layout2.jsonl"
    assert '"search_layout":2' in old.read_text("utf-8").splitlines()[0]
    report = replay_mod.replay(old, strict=True)
    assert report.divergences == [] and report.completed


def test_a_recording_made_with_search_layout_3_replays_strictly():
    # The bundled demo as it was recorded with search layout 3 (every day heading names its
    # conversation, a reply of one word is shown): replayed in that layout.
    old = Path(__file__).resolve().parent / "data" / "demo_search_layout3.jsonl"
    assert '"search_layout":3' in old.read_text("utf-8").splitlines()[0]
    report = replay_mod.replay(old, strict=True)
    assert report.divergences == [] and report.completed


def test_a_recording_made_with_search_layout_4_replays_strictly():
    # The bundled demo as it was recorded with search layout 4 (the reply under a question
    # cut at 300 characters): replayed in that layout.
    old = Path(__file__).resolve().parent / "data" / "demo_search_layout4.jsonl"
    assert '"search_layout":4' in old.read_text("utf-8").splitlines()[0]
    report = replay_mod.replay(old, strict=True)
    assert report.divergences == [] and report.completed
