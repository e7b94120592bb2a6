"""Forget's rules one by one: what a query matches, what becomes of a message the queue
needs (its folded or clipped copy too), the cases the old search-based forget got wrong, no
cap on matches, the input history shared by every agent, a turn a dead process left open,
replay's report of a scrubbed recording, agent names, and deleting an agent after a rename."""

from __future__ import annotations

import json

import pytest

from memgpt_lite.engine import config, privacy, recording
from memgpt_lite.engine import replay as replay_mod
from memgpt_lite.engine.agent import Agent
from memgpt_lite.engine.input_history import InputHistory
from memgpt_lite.engine.matching import FORGOTTEN, Matcher, QueryError
from memgpt_lite.engine.records import Message
from memgpt_lite.engine.shrink import CLIP_MARKER, FOLD_MARKER
from memgpt_lite.engine.store import Store, checks, open_store, transfer
from memgpt_lite.engine.store.scrub import redact_message
from memgpt_lite.lab.scripted import ScriptedModel, text_response, tool_response
from memgpt_lite.terminal import cli


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, monkeypatch):
    """Where the data dir's store lives for the test, the CLI and `open_store()` alike: its
    SQLite file, or a Postgres database (MEMGPT_LITE_DATABASE_URL)."""
    if request.param == "postgres":
        monkeypatch.setenv("MEMGPT_LITE_DATABASE_URL", request.getfixturevalue("pg_url"))
    return request.param


# --------------------------------------------------------------------------- matching


@pytest.mark.parametrize("query, mode, text, hit", [
    ("Paris trip", "phrase", "My Paris trip in May", True),
    ("Paris trip", "phrase", "My trip to Rome", False),
    ("Paris trip", "phrase", "a trip to Paris", False),  # in order
    ("paris TRIP", "phrase", "The PARIS trip", True),  # any case
    ("Paris trip", "phrase", "our Paris\n  trip", True),  # any whitespace, a line break too
    ("Rex", "phrase", "My dog is called Rex.", True),
    ("Rex", "phrase", "My cousin Rexford", False),  # whole words: no prefixes
    ("Rex", "phrase", "T-Rex", True),  # a dash ends a word
    ("Rex", "phrase", "rex_2", True),  # so does an underscore (as in the search index)
    ("medication", "phrase", "the medical checkup", False),  # no stems
    ("dog", "phrase", "two dogs", False),
    ("Rex mountains", "phrase", "I like the mountains", False),
    ("Rex mountains", "phrase", "My dog is called Rex", False),
    ("42", "phrase", "tulip-42", True),
    ("42", "phrase", "142", False),
    ("北京", "phrase", "我住在北京市", True),  # no spaces in Chinese: anywhere
    ("Rex", "phrase", "我的狗Rex很好", True),  # a Latin word next to Chinese
    ("東京", "phrase", "東京都に住んでいます", True),
    ("서울", "phrase", "서울에 살아요", True),
    ("กรุงเทพ", "phrase", "ฉันอยู่กรุงเทพมหานคร", True),
    ("café", "phrase", "Meet at CAFÉ Flore", True),
    # One Unicode form on both sides: an accent composed or written apart, full-width letters
    ("Café", "phrase", "Meet at Cafe\u0301 Flore", True),
    ("Cafe\u0301", "phrase", "Meet at Café Flore", True),
    ("Ｃａｆé", "phrase", "Meet at CAFÉ", True),
    ("café", "phrase", "Ｃａｆｅ\u0301 au lait", True),
    ("Rex", "phrase", "Ｒｅｘford", False),  # still whole words
    ("Cafe", "phrase", "Cafe\u0301", False),  # the accent is part of the letter
    ("Luna Café", "any", "at the Cafe\u0301", True),
    ("caf\\w", "regex", "CAFE\u0301", True),
    ("Ｃａｆé", "regex", "Cafe\u0301", True),
    ("Rex Luna", "any", "my cat Luna", True),
    ("Rex Luna", "any", "Lunar eclipse", False),
    (r"\d{3}-\d{4}", "regex", "call 555-0132", True),
    ("REX", "regex", "rex", True),  # case ignored
    ("(?-i:REX)", "regex", "rex", False),
    ("forgotten", "phrase", f"it was {FORGOTTEN}", False),  # the marker is not a match
    ("the full", "phrase", FOLD_MARKER.format(chars=900, tool="t", preview="x"), False),
])
def test_what_a_query_matches(query, mode, text, hit):
    assert Matcher.build(query, mode).hits(text) is hit


@pytest.mark.parametrize("query, mode, sentence", [
    ("", "phrase", "the query is empty"), ("   ", "any", "the query is empty"),
    ("(", "regex", "is not a valid regular expression"), ("x" * 1001, "phrase", "at most 1,000"),
])
def test_a_query_that_cannot_be_used_is_one_sentence(query, mode, sentence):
    with pytest.raises(QueryError, match=sentence):
        Matcher.build(query, mode)


@pytest.mark.parametrize("query, text, left", [
    ("Café", "a Cafe\u0301 b", f"a {FORGOTTEN} b"),
    ("Cafe\u0301", "a Café b Ｃａｆé", f"a {FORGOTTEN} b {FORGOTTEN}"),
    ("file", "my ﬁle and the ﬁ", f"my {FORGOTTEN} and the ﬁ"),  # a ligature is two letters
    ("Rex", "Ｒｅｘ and Rex and Rexford", f"{FORGOTTEN} and {FORGOTTEN} and Rexford"),
    ("Ñandú", "un N\u0303andu\u0301 y ñandú", f"un {FORGOTTEN} y {FORGOTTEN}"),
])
def test_a_match_in_another_unicode_form_replaces_exactly_its_own_characters(query, text, left):
    assert Matcher.build(query).replace(text) == left


def test_lines_touched_by_a_match_go_and_no_other():
    m = Matcher.build("12 Baker Street")
    left, gone = m.drop_lines("Name: Ada\nLives at 12 Baker\nStreet, London\nLikes tea")
    assert (left, gone) == ("Name: Ada\nLikes tea", ["Lives at 12 Baker", "Street, London"])
    assert m.drop_lines("Likes tea\n") == ("Likes tea\n", [])


# --------------------------------------------------------------------------- the queue's messages


def test_a_fold_is_made_anew_so_a_match_cut_by_its_preview_goes_too():
    body = "x" * 155 + " zanzibar-7781 and more " + "y" * 900
    folded = FOLD_MARKER.format(chars=len(body), tool="archival_search",
                                preview=" ".join(body[:160].split()))
    assert "zanz…" in folded and "zanzibar" not in folded  # cut in half by the preview
    content = [{"type": "tool_result", "tool_use_id": "t1", "content": body}]
    sent = [{"type": "tool_result", "tool_use_id": "t1", "content": folded}]
    new, new_sent = redact_message(content, sent, Matcher.build("zanzibar-7781"))
    assert new[0]["content"] == body.replace("zanzibar-7781", FORGOTTEN)
    assert "zanz" not in new_sent[0]["content"]
    assert new_sent[0]["content"].startswith("[folded to save context:")
    assert new_sent[0]["tool_use_id"] == "t1"


def test_a_clip_that_cut_a_match_in_half_loses_the_half_it_shows():
    text = "a" * 300 + " my address is 12 Baker Street, London " + "b" * 2000
    keep = text.index("Baker") + 3  # the clip fell inside the phrase
    clipped = text[:keep] + CLIP_MARKER.format(cut=len(text) - keep, total=len(text),
                                               how="search it with conversation_search.")
    new, new_sent = redact_message([{"type": "text", "text": text}],
                                   [{"type": "text", "text": clipped}],
                                   Matcher.build("12 Baker Street"))
    assert new[0]["text"] == text.replace("12 Baker Street", FORGOTTEN)
    assert "12 Bak" not in new_sent[0]["text"] and FORGOTTEN in new_sent[0]["text"]
    assert new_sent[0]["text"].endswith("search it with conversation_search.]")


def test_a_thinking_block_that_matches_is_dropped_its_signature_would_not_hold():
    content = [{"type": "thinking", "thinking": "the user likes teal", "signature": "s"},
               {"type": "thinking", "thinking": "keep this", "signature": "t"},
               {"type": "text", "text": "You like teal."}]
    new, sent = redact_message(content, content, Matcher.build("teal"))
    assert new == [content[1], {"type": "text", "text": f"You like {FORGOTTEN}."}] == sent


def scripted_agent(store: Store, name: str, script: list) -> Agent:
    return Agent.open(store, name, model_client=ScriptedModel(script, validate=True))


def test_forgetting_the_reply_keeps_the_question_it_answered(backend):
    """The unit is the message: `forget dog` changes the reply that says it, never the
    user message of that turn, which the preview did not list."""
    with open_store() as store:
        agent = scripted_agent(store, "a", [text_response("Your dog is called Rex."),
                                            text_response("Noted.")])
        list(agent.step("What is my pet called?"))
        list(agent.step("Thanks!"))
        plan = privacy.plan_forget(store, agent.row, Matcher.build("dog"))
        assert [(u.key, u.role) for u in plan.units] == [(2, "assistant")]
        privacy.forget(store, plan)
        queue = store.context_messages(agent.id)
        assert queue[0].content == [{"type": "text", "text": "What is my pet called?"}]
        assert queue[1].content == [{"type": "text", "text": f"Your {FORGOTTEN} is called Rex."}]
        assert checks.queue_problem(queue) is None


def test_a_reply_equal_to_a_forgotten_one_is_left_alone_in_recordings(backend):
    """The old forget blanked every recorded reply whose text equalled a deleted one."""
    with open_store() as store:
        agent = scripted_agent(store, "a", [text_response("Noted.")] * 3)
        recorder = recording.start_recording(agent)
        for text in ("My dog is Rex", "I like tea", "I like the sea"):
            list(recording.recorded_step(agent, recorder, text))
        recorder.close()
        privacy.forget(store, privacy.plan_forget(store, agent.row, Matcher.build("Rex")))
    lines = [json.loads(line) for line in recorder.path.read_text().splitlines()]
    assert [line["text"] for line in lines if line["type"] == "turn_end"] == ["Noted."] * 3
    assert lines[0]["forgotten"]["turns"] == [1]
    report = replay_mod.replay(recorder.path, strict=True)
    assert report.ok and report.scrubbed.turn == 1


def test_no_cap_on_matches_and_the_preview_counts_what_it_does_not_list(backend, capsys):
    with open_store() as store:
        agent = scripted_agent(store, "default", [])
        store.add_messages(agent.id, [
            Message("user", [{"type": "text", "text": f"note {i}: the pin is 4321"}], i,
                    in_context=False) for i in range(1, 1201)])
    assert cli.main(["forget", "4321"]) == 2  # not a terminal: no question, no change
    out = capsys.readouterr().out
    assert "1,200 messages" in out and "1,200 deleted" in out
    assert "… and 1,180 more in messages (--dry-run lists every one)" in out
    assert cli.main(["forget", "4321", "--dry-run"]) == 0
    assert capsys.readouterr().out.count("· delete: note ") == 1200
    assert cli.main(["forget", "4321", "--yes"]) == 0
    assert "1,200 messages deleted" in capsys.readouterr().out
    with open_store() as store:
        row = store.get_agent("default")
        assert store.search_messages(row.id, "4321").total == 0
        assert store.db.query("SELECT count(*) FROM messages WHERE content LIKE '%4321%'")[0][0] == 0


# --------------------------------------------------------------------------- other places


def test_the_input_history_stays_scrubbed_while_another_agents_chat_is_open(backend, tmp_path):
    """One file for every agent, under one lock: a chat open on agent b since before the
    forget (it read the secret line at start) never writes that line back."""
    from memgpt_lite.terminal.user_input import LineReader

    history = InputHistory(config.data_dir())
    history.append(["my locker code is zanzibar-7781", "hello"])
    chat_b = LineReader(history)  # another chat, started before the forget
    with open_store() as store:
        agent = scripted_agent(store, "a", [text_response("ok")])
        list(agent.step("my locker code is zanzibar-7781"))
        plan = privacy.plan_forget(store, agent.row, Matcher.build("zanzibar-7781"))
        assert plan.history == ["my locker code is zanzibar-7781"]
        privacy.forget(store, plan)
    chat_b._remember("a new message on agent b")
    chat_b.save()  # leaving that chat
    assert history.lines() == ["hello", "a new message on agent b"]


def test_an_input_history_that_cannot_be_read_is_named_and_the_rest_is_forgotten(capsys):
    (config.data_dir() / "chat_history").mkdir(parents=True)
    with open_store() as store:
        agent = scripted_agent(store, "a", [text_response("ok")])
        list(agent.step("my locker code is zanzibar-7781"))
        agent.close()
    assert cli.main(["forget", "zanzibar-7781", "--agent", "a", "--yes"]) == 1
    out = capsys.readouterr().out
    assert "Not finished: cannot change the input history (Is a directory)" in out, out
    with open_store() as store:
        assert "zanzibar" not in json.dumps([m.content for m in store.all_messages(
            store.get_agent("a").id)])


def test_the_same_forget_again_after_a_failure_writes_down_no_second_one(backend, capsys):
    """Each run of a forget that could not change the input history wrote down one more
    intent, and every later command then tried each of them, saying "Finished a forget"
    of each while it was not finished."""
    history = config.data_dir() / "chat_history"
    history.mkdir(parents=True)
    for _ in range(3):  # the same text said again, the same forget again
        with open_store() as store:
            agent = scripted_agent(store, "a", [text_response("ok")])
            list(agent.step("my locker code is zanzibar-7781"))
            agent.close()
        assert cli.main(["forget", "zanzibar-7781", "--agent", "a", "--yes"]) == 1
    with open_store() as store:
        assert len(store.forget_intents()) == 1
    capsys.readouterr()
    assert cli.main(["agents", "list"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("a forget cut off") == 1 and err.startswith("Tried again a forget"), err
    history.rmdir()
    assert cli.main(["agents", "list"]) == 0
    assert capsys.readouterr().err.startswith("Finished a forget cut off on")
    with open_store() as store:
        assert store.forget_intents() == []


def test_a_turn_left_open_by_a_dead_process_cannot_bring_the_text_back(backend):
    """Its journal holds the block as it was before the turn; forget undoes the turn first,
    as opening the agent would, then forgets."""
    with open_store() as store:
        agent = scripted_agent(store, "a", [])
        agent.edit_block("human", "Locker: zanzibar-7781\nLikes tea")
        user = Message("user", [{"type": "text", "text": "forget my locker"}], 1)
        store.begin_turn(agent.id, user)  # the process dies mid-turn, after an edit:
        store.set_block(agent.id, "human", "Likes tea")
        store._open_turns.clear()
        privacy.forget(store, privacy.plan_forget(store, agent.row, Matcher.build("zanzibar")))
        assert store.db.query("SELECT count(*) FROM turn_effects")[0][0] == 0
        assert store.get_block(agent.id, "human").value == "Likes tea"
    with open_store() as store:
        Agent.open(store, "a", model_client=ScriptedModel([])).close()
        assert store.get_block(store.get_agent("a").id, "human").value == "Likes tea"
    if backend == "sqlite":  # the file's bytes (Postgres: docs/postgres.md on dead row versions)
        assert b"zanzibar" not in config.db_path().read_bytes()


def test_replay_says_which_turns_a_forget_scrubbed(backend, capsys):
    with open_store() as store:
        agent = scripted_agent(store, "a", [text_response("Noted.")] * 5)
        untouched = recording.start_recording(agent)  # before the text was ever said
        for text in ("hello", "nice weather"):
            list(recording.recorded_step(agent, untouched, text))
        untouched.close()
        scrubbed = recording.start_recording(agent)
        for text in ("sunny", "my locker code is zanzibar", "bye"):
            list(recording.recorded_step(agent, scrubbed, text))
        scrubbed.close()
    assert cli.main(["forget", "zanzibar", "--agent", "a", "--yes"]) == 0
    capsys.readouterr()
    assert cli.main(["replay", str(scrubbed.path), "--strict"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "a forget on " in out and "scrubbed turn 2, so from turn 2 on" in out
    assert "turn 1 matched" in out and "replay matched the recording up to turn 1" in out
    assert cli.main(["replay", str(untouched.path), "--strict"]) == 0
    assert "zero divergence" in capsys.readouterr().out
    assert cli.main(["sessions", "--agent", "a"]) == 0
    assert " ".join(capsys.readouterr().out.split()).count("(scrubbed by a forget)") == 1


# --------------------------------------------------------------------------- agent names


BAD = ["", "a/b", "../../etc", ".hidden", "x" * 65, "tab\there", "naïve"]


@pytest.mark.parametrize("name", BAD)
def test_every_command_that_takes_a_name_refuses_a_bad_new_name(name, capsys):
    for argv in (["core", "--agent", name], ["forget", "x", "--agent", name],
                 ["agents", "show", name], ["agents", "set", name, "model=haiku"],
                 ["agents", "delete", name, "--yes"], ["agents", "export", name, "out.json"],
                 ["agents", "rename", "default", name], ["sessions", "--agent", name],
                 ["agents", "create", name], ["agents", "create", name, "--share", "human"],
                 ["chat", "--agent", name, "--no-record"]):
        assert cli.main(argv) == 2, argv
        captured = capsys.readouterr()
        message = (captured.err + captured.out).strip()
        assert "cannot be an agent name: use 1 to 64 letters" in message, argv
        assert len(message.splitlines()) == 1, argv
    assert not (config.data_dir() / "locks").exists()  # no lock file made for it


def test_an_agent_named_before_the_rule_still_works_and_can_be_renamed(backend, capsys):
    with open_store() as store:
        agent = scripted_agent(store, "a/b", [text_response("Hi.")])
        list(agent.step("Rex is my dog"))
        agent.close()
    assert cli.main(["core", "--agent", "a/b"]) == 0
    assert cli.main(["forget", "Rex", "--agent", "a/b", "--yes"]) == 0
    assert cli.main(["agents", "rename", "a/b", "a-b"]) == 0
    assert cli.main(["core", "--agent", "a-b"]) == 0


def test_sessions_name_the_agent_as_it_is_called_now_after_a_rename(backend, capsys):
    with open_store() as store:
        agent = scripted_agent(store, "old", [text_response("Hi.")] * 2)
        recorder = recording.start_recording(agent)
        list(recording.recorded_step(agent, recorder, "hello"))
        recorder.close()
        agent.close()
    assert cli.main(["agents", "rename", "old", "new"]) == 0
    capsys.readouterr()
    for argv in (["sessions"], ["sessions", "--agent", "new"]):
        assert cli.main(argv) == 0
        assert "new (was old)" in capsys.readouterr().out, argv


def test_a_recording_from_before_agent_uids_stays_the_agents_after_a_rename(backend, capsys):
    """A recording made before agent uids (recordings/<name>/, no agent_uid in its header)
    is the agent's by its name alone: after `agents rename` it was in no agent's `sessions`,
    and a forget left the text in it."""
    with open_store() as store:
        agent = scripted_agent(store, "ana", [text_response("Noted.")] * 2)
        recorder = recording.start_recording(agent)
        list(recording.recorded_step(agent, recorder, "my safe word is zanzibar"))
        recorder.close()
        agent.close()
    old = config.recordings_dir() / "ana" / recorder.path.name  # as those versions kept it
    old.parent.mkdir()
    lines = recorder.path.read_text("utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    header.pop("agent_uid")
    old.write_text(json.dumps(header) + "\n" + "".join(lines[1:]), "utf-8")
    recorder.path.unlink()
    assert cli.main(["agents", "rename", "ana", "anna"]) == 0
    capsys.readouterr()
    assert cli.main(["sessions", "--agent", "anna"]) == 0
    assert old.stem in capsys.readouterr().out
    assert cli.main(["forget", "zanzibar", "--agent", "anna", "--yes"]) == 0
    assert "zanzibar" not in old.read_text("utf-8")
    assert replay_mod.replay(old).ok  # it still replays, up to the scrub


def test_import_refuses_a_bad_name_and_says_how_to_give_another(backend, tmp_path, capsys):
    with open_store() as store:
        scripted_agent(store, "ok", []).close()
    export = tmp_path / "e.json"
    assert cli.main(["agents", "export", "ok", str(export)]) == 0
    doc = json.loads(export.read_text())
    doc["agent"]["name"] = "../x"
    export.write_text(json.dumps(doc))
    assert cli.main(["agents", "import", str(export)]) == 2
    assert "Import it with --name NEW." in capsys.readouterr().err
    assert cli.main(["agents", "import", str(export), "--name", "x"]) == 0


# --------------------------------------------------------------------------- deleting an agent


def test_renaming_then_deleting_an_agent_leaves_no_file_of_it(backend, capsys, monkeypatch):
    from memgpt_lite.engine.store import snapshot

    monkeypatch.setattr(snapshot, "BASE_REFRESH_ROWS", 2)
    with open_store() as store:
        keep = scripted_agent(store, "other", [text_response("fine")])
        list(keep.step("the other agent stays"))
        keep.close()
        agent = scripted_agent(store, "old", [text_response("Noted.")] * 6)
        for session in range(2):
            recorder = recording.start_recording(agent)
            for text in ("my quokka is called Pip", "hello"):
                list(recording.recorded_step(agent, recorder, text))
            recorder.close()
        uid = agent.row.uid
        agent.close()
    before = {p for p in config.data_dir().rglob("*") if p.is_file()}
    assert any("bases" in p.parts for p in before) and len(list(
        config.recordings_dir().joinpath(uid).glob("*.jsonl"))) == 2
    assert cli.main(["agents", "rename", "old", "new"]) == 0
    with open_store() as store:  # a chat under the new name made its lock file
        Agent.open(store, "new", model_client=ScriptedModel([])).close()
    assert cli.main(["agents", "delete", "new", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "removed 2 recording file(s), 1 base snapshot(s), the folder" in out
    left = {p for p in config.data_dir().rglob("*") if p.is_file()}
    assert not [p for p in left if uid in str(p) or "old" in p.name or "new" in p.name]
    assert not [p for p in left if p.suffix in (".jsonl", ".db") and "recordings" in p.parts]
    assert cli.main(["core", "--agent", "other"]) == 0
    if backend == "postgres":  # no row of it is left (old row versions: see docs/postgres.md)
        with open_store() as store:
            assert [a.name for a in store.list_agents()] == ["other"]
            assert store.db.query("SELECT count(*) FROM messages WHERE content LIKE '%%quokka%%'") \
                == [(0,)]
        return
    data = config.db_path().read_bytes()
    wal = config.db_path().with_name(config.db_path().name + "-wal")
    assert b"quokka" not in data + (wal.read_bytes() if wal.exists() else b"")


# --------------------------------------------------------------------------- shared blocks


def test_a_line_of_a_shared_block_goes_for_every_agent_sharing_it(backend, capsys):
    """A user-scope block is one row: forgetting its line in one agent removes it for all,
    and the preview says who else shares it (their own history stays theirs to forget)."""
    with open_store() as store:
        for name in ("a", "b"):
            agent = scripted_agent(store, name, [])
            store.share_block(agent.id, "human")
            agent.close()
        a = store.get_agent("a")
        store.set_block(a.id, "human", "Name: Ada\nLives at 12 Elm Street\n", source="test")
    assert cli.main(["forget", "Elm Street", "--agent", "a", "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "core memory 'human' is shared with b" in out and "--agent b" in out
    assert cli.main(["forget", "Elm Street", "--agent", "a", "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["shared_blocks"] == {"human": ["b"]}
    with open_store() as store:
        for name in ("a", "b"):
            block = store.get_block(store.get_agent(name).id, "human")
            assert block.value == "Name: Ada\n" and block.scope == "user"
        assert "Elm" not in json.dumps(store.block_history(store.get_agent("a").id))


def test_no_version_of_a_block_seen_with_others_brings_a_forgotten_line_back(
        backend, capsys, tmp_path):
    """`core --history` of a shared or project block lists every agent's writes to it, and
    `core --restore` puts one back: a forget in one agent left the others' writes there, so
    restoring one brought the forgotten line back into the block they all see."""
    with open_store() as store:
        a = scripted_agent(store, "a", [])
        store.share_block(a.id, "human")
        a.close()
        b = Agent.open(store, "b", project=str(tmp_path), model_client=ScriptedModel([
            tool_response([("core_memory_append", {"label": "human", "content": "Kiwi allergy"}),
                           ("core_memory_append", {"label": "project", "content": "Kiwi CI"})]),
            text_response("Noted.")], validate=True))
        store.share_block(b.id, "human")
        assert list(b.step("remember both"))[-1].completed
        b.close()
    assert cli.main(["forget", "Kiwi", "--agent", "a", "--yes"]) == 0
    capsys.readouterr()
    for label in ("human", "project"):
        assert cli.main(["core", "--agent", "a", "--project", str(tmp_path),
                         "--history", label]) == 0
        out = capsys.readouterr().out
        assert "Kiwi" not in out
        versions = sum(line[:1].isdigit() for line in out.splitlines())
        for n in range(1, versions + 1):
            assert cli.main(["core", "--agent", "a", "--project", str(tmp_path),
                             "--restore", label, str(n)]) == 0
    capsys.readouterr()
    assert cli.main(["core", "--agent", "a", "--project", str(tmp_path)]) == 0
    assert "Kiwi" not in capsys.readouterr().out


def test_the_preview_names_the_other_agents_that_worked_in_a_project_it_changes(
        backend, capsys, tmp_path):
    """A project's block is seen by every agent working there: the forget removed the line,
    but the other agent's own recordings (and the tool call that wrote it) kept it, and the
    preview said nothing of them, as it does for a shared block."""
    with open_store() as store:
        b = Agent.open(store, "b", project=str(tmp_path), model_client=ScriptedModel([
            tool_response([("core_memory_append", {"label": "project",
                                                   "content": "Deploy key: kiwi-77"})]),
            text_response("Noted.")], validate=True))
        recorder = recording.start_recording(b)
        assert list(recording.recorded_step(b, recorder, "remember the key"))[-1].completed
        recorder.close()
        b.close()
        scripted_agent(store, "a", []).close()
    assert cli.main(["forget", "kiwi-77", "--agent", "a", "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"project memory of {tmp_path} goes for every agent working there; b worked " \
           "there too" in out and "--agent b" in out, out
    assert cli.main(["forget", "kiwi-77", "--agent", "a", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["project_agents"] == {str(tmp_path): ["b"]}
    assert cli.main(["forget", "kiwi-77", "--agent", "b", "--json"]) == 0  # b: its own
    assert json.loads(capsys.readouterr().out)["plan"]["project_agents"] == {str(tmp_path): []}


def test_forgetting_one_fact_of_the_summary_keeps_the_others(backend):
    """The summariser writes one paragraph: forgetting its line erased every fact in it.
    The unit is the sentence: the preview lists it, and the rest of the summary stays."""
    summary = ("The user has a beagle called Rex. They work as a nurse in Oslo. "
               "Their sister visits in May.")
    with open_store() as store:
        agent = scripted_agent(store, "a", [text_response("ok")])
        store.set_summary(agent.id, summary)
        plan = privacy.plan_forget(store, agent.row, Matcher.build("Rex"))
        [unit] = [u for u in plan.units if u.place == "summary"]
        assert unit.lines == ["The user has a beagle called Rex."]
        privacy.forget(store, plan)
        assert store.get_agent("a").summary == ("They work as a nurse in Oslo. "
                                                "Their sister visits in May.")


def test_the_reason_a_passage_was_deleted_with_is_forgotten_too(backend):
    """archival_delete keeps the passage's last version with the model's reason, which the
    model is shown again when it names that passage, and exports carry: a reason naming the
    forgotten text kept it, though the preview said passage history was clean."""
    with open_store() as store:
        agent = scripted_agent(store, "a", [
            tool_response([("archival_insert", {"content": "Ada has a beagle."})]),
            text_response("Saved."),
            tool_response([("archival_delete", {"passage_id": 1,
                                                "reason": "The beagle Rex died in March."})]),
            text_response("I am sorry."),
            tool_response([("archival_update", {"passage_id": 1, "content": "x"})]),
            text_response("ok")])
        for text in ("I have a beagle", "My beagle died"):
            assert list(agent.step(text))[-1].completed
        plan = privacy.plan_forget(store, agent.row, Matcher.build("Rex"))
        assert plan.counts()["passage history"] == 1
        privacy.forget(store, plan)
        assert store.passage_versions(agent.id) == []
        assert list(agent.step("update it"))[-1].completed  # the model names it again
        assert "Rex" not in json.dumps([m.content for m in store.all_messages(agent.id)])
        assert "Rex" not in json.dumps(transfer.export_agent(store, "a"))


def test_no_version_another_agent_saw_when_it_joined_a_shared_block_brings_a_line_back(
        backend, capsys):
    """An agent joining a user-scope block keeps what it saw before in its own history: the
    row's new value is the shared value, forgotten line included. Its `core --history`
    listed it after a forget in another agent sharing the block, and `core --restore` put
    the line back into the block they all see."""
    with open_store() as store:
        a = scripted_agent(store, "a", [])
        store.share_block(a.id, "human")
        store.set_block(a.id, "human", "Name: Ada\nFriend: Quixotl", source="test")
        a.close()
        b = scripted_agent(store, "b", [])
        store.set_block(b.id, "human", "Likes tea", source="test")
        store.share_block(b.id, "human")  # keeps the shared value; its own goes to history
        b.close()
    assert cli.main(["forget", "Quixotl", "--agent", "a", "--yes"]) == 0
    capsys.readouterr()
    assert cli.main(["core", "--agent", "b", "--history", "human"]) == 0
    out = capsys.readouterr().out
    assert "Quixotl" not in out and "Likes tea" in out
    for n in range(1, sum(line[:1].isdigit() for line in out.splitlines()) + 1):
        assert cli.main(["core", "--agent", "b", "--restore", "human", str(n)]) == 0
        capsys.readouterr()
        with open_store() as store:
            assert "Quixotl" not in store.get_block(store.get_agent("a").id, "human").value


def test_on_one_postgres_from_two_data_dirs_each_forgets_its_own_files(pg_url, monkeypatch,
                                                                       tmp_path):
    """Recordings and the input history are files of the data dir a chat ran in: a forget
    changes the store for every machine, and the files of its own data dir; the same forget
    run in the other data dir finds nothing left in the store and scrubs that one's files
    (docs/forgetting.md)."""
    monkeypatch.setenv("MEMGPT_LITE_DATABASE_URL", pg_url)
    homes = [tmp_path / "laptop", tmp_path / "desktop"]
    for home in homes:
        monkeypatch.setenv("MEMGPT_LITE_HOME", str(home))
        InputHistory(config.data_dir()).append(["my locker code is zanzibar-7781"])
        with open_store() as store:
            agent = scripted_agent(store, "a", [text_response("Noted.")])
            recorder = recording.start_recording(agent)
            list(recording.recorded_step(agent, recorder, "my locker code is zanzibar-7781"))
            recorder.close()
            agent.close()

    def left(home) -> list[str]:
        return [p.name for p in home.rglob("*") if p.is_file() and b"zanzibar" in p.read_bytes()]

    monkeypatch.setenv("MEMGPT_LITE_HOME", str(homes[0]))
    assert cli.main(["forget", "zanzibar-7781", "--agent", "a", "--yes"]) == 0
    assert left(homes[0]) == []
    assert "chat_history" in left(homes[1]) and any(n.endswith(".jsonl") for n in left(homes[1]))
    monkeypatch.setenv("MEMGPT_LITE_HOME", str(homes[1]))
    assert cli.main(["forget", "zanzibar-7781", "--agent", "a", "--yes"]) == 0
    assert left(homes[1]) == []


def test_a_query_with_bytes_that_are_not_utf8_finds_the_text_they_were_stored_as(capsys):
    """A message piped in Latin-1 is stored with U+FFFD for each byte that is not UTF-8 (the
    one rule for text); the same bytes typed as the query were matched as they came, so
    nothing ever matched them. The query follows the same rule."""
    latin1 = b"Caf\xe9 Flore".decode("utf-8", "surrogateescape")  # as a piped chat reads it
    with open_store() as store:
        agent = scripted_agent(store, "default", [text_response("ok")])
        assert list(agent.step(f"meet me at {latin1}"))[-1].completed
        agent.close()
    assert cli.main(["forget", latin1, "--yes"]) == 0
    assert "1 message redacted" in " ".join(capsys.readouterr().out.split())
    with open_store() as store:
        texts = json.dumps([m.content for m in store.all_messages(store.get_agent("default").id)])
        assert "Flore" not in texts and FORGOTTEN in texts


def test_a_pattern_over_an_earlier_marker_forgets_the_text_around_it():
    """A match that ran over a [forgotten] marker was dropped whole, so `forget --regex
    '(?s).+'` (forget everything) left every message an earlier forget had touched as it
    was, the rest of its text included. The marker itself is still never a match, so
    forgetting twice changes nothing."""
    text = f"My dog is called {FORGOTTEN}. I live at 12 Elm Street."
    everything = Matcher.build("(?s).+", "regex")
    once = everything.replace(text)
    assert "Elm" not in once and "dog" not in once
    assert everything.replace(once) == once and not everything.hits(once)
    assert Matcher.build("forgotten").spans(text) == []
    assert Matcher.build(r"called \S+ I", "regex").replace(text) == (
        f"My dog is {FORGOTTEN * 3} live at 12 Elm Street.")


# --------------------------------------------------------------------------- unicode forms


def test_text_stored_in_another_unicode_form_is_forgotten_everywhere(backend, capsys,
                                                                     monkeypatch):
    """`forget Café` missed `Cafe` + a combining accent (what macOS and some keyboards
    write) in every place, and the preview counted none of it; a full-width `Ｃａｆé` too."""
    from memgpt_lite.engine.store import snapshot

    monkeypatch.setattr(snapshot, "BASE_REFRESH_ROWS", 2)
    apart, wide = "Cafe\u0301 Flore", "Ｃａｆé Flore"
    with open_store() as store:
        agent = scripted_agent(store, "a", [text_response("Noted.")] * 4)
        store.add_passage(agent.id, f"We met at {apart}.", ["places"])
        agent.edit_block("human", f"Likes {wide}\nLikes tea")
        recorder = recording.start_recording(agent)
        for text in (f"meet me at {apart}", "hello"):
            list(recording.recorded_step(agent, recorder, text))
        recorder.close()
        agent.close()
    InputHistory(config.data_dir()).append([f"meet me at {apart}", "hello"])
    assert cli.main(["forget", "Café Flore", "--agent", "a", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["plan"]["counts"]
    assert (counts["messages"], counts["passages"], counts["core memory"]) == (1, 1, 1)
    assert counts["recordings"] == 1 and counts["input history"] == 1
    assert counts["base snapshots"] == 1
    assert cli.main(["forget", "Café Flore", "--agent", "a", "--yes"]) == 0
    capsys.readouterr()
    with open_store() as store:
        row = store.get_agent("a")
        stored = json.dumps([m.content for m in store.all_messages(row.id)]
                            + [p.text for p in store.list_passages(row.id)]
                            + [store.get_block(row.id, "human").value], ensure_ascii=False)
        assert "Flore" not in stored and "hello" in stored and "Likes tea" in stored
    assert "Flore" not in recorder.path.read_text("utf-8")
    assert InputHistory(config.data_dir()).lines() == ["hello"]
    for base in config.recordings_dir().rglob("bases/*.db"):
        assert "Caf".encode() not in base.read_bytes() + b"".join(
            p.read_bytes() for p in base.parent.glob(base.name + "-*"))
    assert cli.main(["forget", "Café Flore", "--agent", "a", "--json"]) == 0  # nothing left
    assert not any(json.loads(capsys.readouterr().out)["plan"]["counts"].values())


# --------------------------------------------------------------------------- attachments


def test_an_attached_files_tag_and_clip_marker_are_never_a_match(backend, capsys):
    """`forget --any name` found "name" in the tag of every attached file (`<attachment
    name="…"`), listed each such message though nobody wrote the word, and broke the tag;
    `forget recall` did the same with the marker of a clipped file."""
    from memgpt_lite.engine import attachments

    small = attachments.from_bytes("notes.txt", b"my locker code is tulip-42")
    big = attachments.from_bytes("log.txt", b"a quiet line\n" * 3_000)  # clipped in context
    with open_store() as store:
        agent = scripted_agent(store, "a", [text_response("Read them.")])
        list(agent.step("see these files", attachments=[small.block(), big.block()]))
        agent.close()
    for query in ("name", "chars", "attachment", "recall", "the whole file"):
        assert cli.main(["forget", "--any", query, "--agent", "a", "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)["plan"]
        assert [u for u in plan["units"] if u["place"] == "messages"] == [], query
    assert cli.main(["forget", "notes.txt", "--agent", "a", "--yes"]) == 0  # its name: yes
    assert cli.main(["forget", "tulip-42", "--agent", "a", "--yes"]) == 0
    capsys.readouterr()
    with open_store() as store:
        (user, _reply) = store.context_messages(store.get_agent("a").id)
        first = user.content[0]["text"]
        assert first == (f'<attachment name="{FORGOTTEN}" chars="26">\n'
                         f'my locker code is {FORGOTTEN}\n</attachment>')
        assert all(attachments.is_attachment(b) for b in user.api_content()[:2])


def test_the_stores_pre_filter_lets_through_every_text_a_query_matches_in_any_form():
    """The probe (SQLite runs it over every row) folds only a text holding a character that
    may fold into a match; it must never drop one the matcher would find."""
    import random

    from memgpt_lite.engine.store.scrub import could_hold, probe_pattern

    pool = ["a", "e", "f", "i", "k", "s", "C", " ", "\n", "é", "e\u0301", "É", "E\u0301",
            "ﬁ", "Ｃ", "ａ", "ｆ", "ｅ", "ſ", "\u212a", "…", "，", "가", "\u1100\u1161",
            "\u1161", "中", "①", "\u00a0", "\u0301", '"', "\\", "ǅ", "ß"]
    queries = ["cafe", "Café", "file", "k", "sa", "가", "ck", "e\u0301", "Ｃａｆé", "1", "ß"]
    rng = random.Random(7)
    for _ in range(4_000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 10)))
        for query in queries:
            for mode in ("phrase", "any"):
                matcher = Matcher.build(query, mode)
                if matcher.hits(text):
                    probe = probe_pattern(matcher)
                    assert could_hold(probe, text), (query, mode, text)
                    assert could_hold(probe, json.dumps(text, ensure_ascii=False)), (query, text)


def test_a_damaged_base_snapshot_is_named_and_the_recordings_are_scrubbed_all_the_same(
        backend, capsys, monkeypatch):
    """A base snapshot that is no longer a database: the preview and the forget ended in a
    traceback (the damage sentence itself failed), and a forget finished later stopped at
    it silently, leaving every recording unscrubbed."""
    from memgpt_lite.engine.store import snapshot

    monkeypatch.setattr(snapshot, "BASE_REFRESH_ROWS", 2)
    with open_store() as store:
        agent = scripted_agent(store, "a", [text_response("Noted.")] * 2)
        list(agent.step("my locker is tulip-42"))
        recorder = recording.start_recording(agent)  # from a base snapshot holding it
        list(recording.recorded_step(agent, recorder, "again: tulip-42"))
        recorder.close()
        agent.close()
        (base,) = privacy.agent_bases(store.get_agent("a"))
    base.write_bytes(b"not a database" * 500)
    assert cli.main(["forget", "tulip-42", "--agent", "a", "--dry-run"]) == 0
    assert cli.main(["forget", "tulip-42", "--agent", "a", "--yes"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert f"Not finished: cannot change {base} (it is damaged; a base snapshot only " in out
    assert "tulip" not in recorder.path.read_text("utf-8")
    base.unlink()
    assert cli.main(["agents", "list"]) == 0
    assert capsys.readouterr().err.startswith("Finished a forget cut off on")


def test_an_open_chat_counts_what_a_forget_in_another_process_left(backend, capsys):
    """A chat's agent keeps what it learned of the server's tokens and a decoded copy of
    its queue; after `memgpt-lite forget` (its own store, as another process) its /context
    and the agents' counts are those of what is left, not of what was there."""
    blob = "zebra " * 2_000
    with open_store() as store:
        agent = scripted_agent(store, "default", [text_response("Noted.")] * 3)
        list(agent.step("first words, the old ones " + blob))
        list(agent.step("kept words " + blob))
        store.set_in_context(agent.id, [1], False)  # turn 1 left the queue: forget deletes it
        before = agent.context_report()
        assert store.agent_stats(agent.id)["messages"] == 4
        assert cli.main(["forget", "zebra", "--yes"]) == 0
        assert store.agent_stats(agent.id)["messages"] == 3
        after = agent.context_report()
        (turn,) = after.turns
        assert turn.first_words.startswith(f"kept words {FORGOTTEN}")
        assert after.ledger["queue"] != before.ledger["queue"]
        with open_store() as again:  # a chat started after the forget
            fresh = Agent.open(again, "default", model_client=ScriptedModel([]))
            assert fresh.context_report() == after
    capsys.readouterr()
    assert cli.main(["agents", "list"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[2:4] == ["2", "3"]
