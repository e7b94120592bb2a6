"""`memgpt-lite mcp` spoken to with the MCP SDK's own clients: in process (fast), and as a
real subprocess over stdio (slow): the tools and resources listed, every tool called with
good and bad input, the edits seen by `memgpt-lite core`, a closed stdin ending it cleanly,
and a chat running on the same agent at the same time (through the fake model server)
without a lost edit, its requests holding the MCP edits, its recording replaying strictly.
On SQLite and on Postgres."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation

from memgpt_lite.engine import config
from memgpt_lite.engine.memory import memory_tool_schemas
from memgpt_lite.engine.memory_service import MemoryService
from memgpt_lite.engine.store import open_store
from memgpt_lite.lab.bench.startup import cli_command
from memgpt_lite.lab.scripted import text_response, tool_response
from memgpt_lite.terminal import cli
from memgpt_lite.terminal.mcp_server import build_server, repaired

TOOLS = ["core_memory_view", "core_memory_append", "core_memory_replace", "conversation_search",
         "archival_insert", "archival_update", "archival_delete", "archival_search"]
CLIENT = Implementation(name="pytest-client", version="1.0")


def run(coroutine_fn, *args):
    return anyio.run(coroutine_fn, *args)


def text(result) -> str:
    return "".join(c.text for c in result.content)


# --------------------------------------------------------------------------- in process


@pytest.fixture
def service(tmp_path):
    with open_store() as store:
        yield MemoryService.open(store, "work", tmp_path)


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # the handshake era and the newer one
def test_the_tools_keep_the_chats_schemas_and_say_which_only_read(service, mode):
    async def main():
        async with Client(build_server(service), mode=mode, client_info=CLIENT) as client:
            assert "core_memory_view" in client.instructions
            return (await client.list_tools()).tools

    tools = run(main)
    assert [t.name for t in tools] == TOOLS
    chat = {t["name"]: t["input_schema"] for t in memory_tool_schemas()}
    for tool in tools[1:]:
        assert tool.input_schema == chat[tool.name]
    hints = {t.name: (t.annotations.read_only_hint, t.annotations.destructive_hint)
             for t in tools}
    assert hints["archival_search"] == (True, None)
    assert hints["archival_insert"] == (False, False)
    assert hints["archival_delete"] == (False, True)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_bad_call_is_a_tool_error_and_the_client_is_the_author(service, mode):
    async def main():
        async with Client(build_server(service), mode=mode, client_info=CLIENT) as client:
            bad = await client.call_tool("core_memory_append", {"label": "human", "content": 3})
            unknown = await client.call_tool("rm_rf", {})
            good = await client.call_tool("core_memory_append",
                                          {"label": "human", "content": "Likes tea."})
            return bad, unknown, good

    bad, unknown, good = run(main)
    assert bad.is_error and text(bad) == "Argument 'content' must be a string, got int 3."
    assert unknown.is_error and text(unknown).startswith("Unknown tool 'rm_rf'")
    assert not good.is_error and "Likes tea." in text(good)
    history = service.store.block_history(service.row.id, "human")
    assert history[-1]["source"] == "mcp:pytest-client"


def test_an_embedder_set_in_the_config_file_gives_the_server_hybrid_search(service):
    """The server chooses its embedder as the chat does: the environment, else the config
    file (else an installed default model)."""
    from memgpt_lite.engine import config_file
    from memgpt_lite.terminal.mcp_server import _attach_dense

    os.environ.pop("MEMGPT_LITE_EMBEDDER", None)
    _attach_dense(service)
    assert service.tools.dense is None  # nothing set, nothing installed: keywords only
    config_file.config_path().parent.mkdir(parents=True, exist_ok=True)
    config_file.config_path().write_text(
        'embedder = "http"\nembeddings_url = "http://127.0.0.1:9"\nembeddings_model = "m"\n')
    _attach_dense(service)
    assert service.tools.dense is not None


def test_blocks_are_resources_and_an_unknown_one_is_an_error(service):
    async def main():
        async with Client(build_server(service), mode="legacy") as client:
            listed = (await client.list_resources()).resources
            assert (await client.list_resource_templates()).resource_templates == []
            read = await client.read_resource("memgpt-lite://agents/work/core/human")
            with pytest.raises(MCPError, match="no core memory block at"):
                await client.read_resource("memgpt-lite://agents/work/core/nope")
            return listed, read

    listed, read = run(main)
    assert [(r.name, r.mime_type) for r in listed] == [("persona", "text/plain"),
                                                       ("human", "text/plain"),
                                                       ("project", "text/plain")]
    assert "36/5,000 chars, scope agent" in listed[1].description
    assert read.contents[0].text == "Nothing is known about the user yet."


def test_resources_of_an_agent_deleted_meanwhile_say_so(service, tmp_path):
    async def main():
        async with Client(build_server(service), mode="legacy") as client:
            with pytest.raises(MCPError, match="no core memory block at x{199}…; "):
                await client.read_resource("x" * 100_000)  # the URI is not echoed whole
            with open_store() as other:  # another process deletes the agent
                other.delete_agent("work")
            errors = []
            for call in (client.list_resources(),
                         client.read_resource("memgpt-lite://agents/work/core/human")):
                with pytest.raises(MCPError) as info:
                    await call
                errors.append(info.value.error.message)
            return errors

    assert run(main) == ["The agent 'work' was deleted while this server ran; restart the "
                         "server to serve another agent."] * 2


def cut_off_turn(store, tmp_path) -> int:
    """A chat's turn left open with an edit in it, as kill -9 mid-turn leaves it."""
    from memgpt_lite.engine.agent import Agent
    from memgpt_lite.engine.records import Message
    from memgpt_lite.lab.scripted import ScriptedModel

    agent = Agent.open(store, "work", model_client=ScriptedModel([]), lock_wait=None)
    store.begin_turn(agent.id, Message("user", [{"type": "text", "text": "hi"}], 1,
                                       in_context=False))
    agent.tools.execute("core_memory_append", {"label": "human", "content": "Cut off."})
    return agent.id


def test_a_turn_a_dead_chat_cut_off_is_undone_before_a_call(tmp_path):
    with open_store() as chat_store, open_store() as mcp_store:
        agent_id = cut_off_turn(chat_store, tmp_path)
        service = MemoryService.open(mcp_store, "work", tmp_path)

        async def main():
            async with Client(build_server(service), mode="legacy") as client:
                return await client.call_tool("core_memory_append",
                                              {"label": "human", "content": "From MCP."})

        assert not run(main).is_error
        assert mcp_store.unfinished_turns(agent_id) == []
        assert mcp_store.get_block(agent_id, "human").value == "From MCP."


@pytest.mark.slow
def test_a_turn_another_process_holds_is_left_alone(tmp_path):
    with open_store() as chat_store, open_store() as mcp_store:
        agent_id = cut_off_turn(chat_store, tmp_path)
        code = ("import sys, time; from memgpt_lite.engine.locking import AgentLock; "
                "AgentLock(sys.argv[1], 'work').acquire(0); print('held', flush=True); "
                "time.sleep(120)")
        holder = subprocess.Popen([sys.executable, "-c", code, str(config.data_dir())],
                                  stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        try:
            assert holder.stdout.readline().strip() == "held"  # type: ignore[union-attr]
            service = MemoryService.open(mcp_store, "work", tmp_path)

            async def main():
                async with Client(build_server(service), mode="legacy") as client:
                    return await client.call_tool("core_memory_append",
                                                  {"label": "human", "content": "From MCP."})

            assert not run(main).is_error
        finally:
            holder.kill()
            holder.wait()
        assert mcp_store.unfinished_turns(agent_id) == [1]  # the running chat's, untouched
        assert mcp_store.get_block(agent_id, "human").value == "Cut off.\nFrom MCP."


def test_lone_surrogates_in_a_line_become_replacement_characters():
    line = r'{"params": {"content": "cut \ud83d here, whole \ud83d\ude00, kept \\ud800"}}' + "\n"
    assert json.loads(repaired(line)) == {"params": {"content":
                                                     "cut \ufffd here, whole 😀, kept \\ud800"}}
    whole = r'{"content": "\ud83d\ude00 and \\ud800"}' + "\n"
    assert repaired(whole) is whole  # nothing to repair: the line as it came
    assert repaired("not json \\ud800\n") == "not json \\ud800\n"


@pytest.mark.slow
def test_a_calls_file_saved_with_a_byte_order_mark_is_answered(tmp_path):
    """Notepad starts a UTF-8 file with a byte-order mark: `memgpt-lite mcp < calls.jsonl`
    left its first line, the initialize, unanswered."""
    calls = tmp_path / "calls.jsonl"
    calls.write_text("".join(json.dumps(m) + "\n" for m in [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "raw-client", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "core_memory_view", "arguments": {}}}]), "utf-8-sig")
    with calls.open("rb") as stdin:
        proc = subprocess.run([*cli_command(), "mcp"], stdin=stdin, capture_output=True,
                              timeout=120, env=dict(os.environ))
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    answers = {a["id"]: a for a in map(json.loads, proc.stdout.splitlines())}
    assert answers[1]["result"]["serverInfo"]["name"] == "memgpt-lite"
    assert answers[2]["result"]["isError"] is False


def test_without_the_sdk_the_command_names_the_extra(monkeypatch, capsys):
    import memgpt_lite.terminal

    monkeypatch.delattr(memgpt_lite.terminal, "mcp_server", raising=False)
    monkeypatch.delitem(sys.modules, "memgpt_lite.terminal.mcp_server", raising=False)
    for name in ("mcp", "mcp_types"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails
    assert cli.main(["mcp"]) == 1
    err = capsys.readouterr().err
    assert err == ("memgpt-lite: memgpt-lite mcp needs the MCP Python SDK: pip install "
                   "'memgpt-lite[mcp]'.\n")


def test_a_bad_project_or_agent_name_is_one_sentence(tmp_path, capsys):
    assert cli.main(["mcp", "--project", str(tmp_path / "gone")]) == 2
    assert capsys.readouterr().err.startswith("memgpt-lite: The project directory ")
    assert cli.main(["mcp", "--agent", ".hidden"]) == 2
    assert "cannot be an agent name" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("pipe", ["<&-", ">&-"])
def test_started_with_stdin_or_stdout_closed_it_says_so_in_one_sentence(pipe):
    proc = subprocess.run(["sh", "-c", f'exec "$@" {pipe}', "sh", *cli_command(), "mcp"],
                          stdin=subprocess.DEVNULL if pipe == ">&-" else None,
                          stderr=subprocess.PIPE, text=True, timeout=120, env=dict(os.environ))
    closed = "stdin" if pipe == "<&-" else "stdout"
    assert proc.returncode == 2
    assert proc.stderr.startswith("memgpt-lite: memgpt-lite mcp talks to its MCP client over "
                                  f"stdin and stdout, and its {closed} is closed;"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    assert not config.db_path().exists()  # nothing was opened or created


def test_a_data_dir_that_cannot_be_made_is_one_sentence(tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("not a folder\n")
    monkeypatch.setenv("MEMGPT_LITE_HOME", str(tmp_path / "a-file" / "home"))
    assert cli.main(["mcp", "--project", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memgpt-lite: The data dir ") and err.count("\n") == 1
    assert "is a file, not a folder" in err


# --------------------------------------------------------------------------- real processes


@pytest.fixture(params=["sqlite", "postgres"])
def db_env(request) -> dict[str, str]:
    """The environment of every process of a test: its data dir, and on Postgres the URL."""
    env = dict(os.environ)
    if request.param == "postgres":
        env["MEMGPT_LITE_DATABASE_URL"] = request.getfixturevalue("pg_url")
    return env


def server_params(env: dict[str, str], *args: str) -> StdioServerParameters:
    cmd = cli_command()
    return StdioServerParameters(command=cmd[0], args=[*cmd[1:], "mcp", "--agent", "work",
                                                      *args], env=env)


def memgpt(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), *args], capture_output=True, text=True, env=env,
                          timeout=120)


GOOD = [
    ("core_memory_view", {}, "Core memory of agent 'work'"),
    ("core_memory_append", {"label": "human", "content": "Name: Ada."}, "Name: Ada."),
    ("core_memory_replace", {"label": "human", "old_content": "Ada.",
                             "new_content": "Ada Lovelace."}, "Ada Lovelace."),
    ("archival_insert", {"content": "The blog deploys with hexo g.", "tags": ["blog"]},
     "Stored as passage #1"),
    ("archival_search", {"query": "hexo"}, "#1"),
    ("archival_update", {"passage_id": 1, "content": "The blog deploys with hexo d."},
     "Passage #1 updated"),
    ("conversation_search", {"query": "hexo"}, "No matches"),
    ("archival_insert", {"content": "A passage to delete."}, "Stored as passage #2"),
    ("archival_delete", {"passage_id": 2, "reason": "a test"}, "Passage #2 deleted"),
]
BAD = [
    ("core_memory_view", {"x": 1}, "takes no arguments"),
    ("core_memory_append", {"label": "human"}, "Missing required argument 'content'"),
    ("core_memory_append", {"label": "human", "content": "x" * 20_001}, "at most 20,000"),
    ("core_memory_replace", {"label": "human", "old_content": "zebra", "new_content": "x"},
     "was not found"),
    ("conversation_search", {"query": "x", "page": "two"}, "must be an integer"),
    ("archival_insert", {"content": "   "}, "content is empty"),
    ("archival_search", {"query": "x", "tags": "blog"}, "must be a list of strings"),
    ("archival_update", {"passage_id": 2**60, "content": "x"}, "between 1 and"),
    ("archival_delete", {"passage_id": 2, "reason": "again"}, "was deleted on"),
    ("memory_wipe", {}, "Unknown tool 'memory_wipe'"),
]


@pytest.mark.slow
def test_a_real_server_answers_every_tool_and_core_shows_the_edits(db_env, tmp_path):
    async def main():
        async with Client(server_params(db_env, "--project", str(tmp_path)),
                          client_info=CLIENT) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            resources = [r.uri for r in (await client.list_resources()).resources]
            results = [(name, await client.call_tool(name, args), words)
                       for name, args, words in GOOD + BAD]
            read = await client.read_resource("memgpt-lite://agents/work/core/human")
            return tools, resources, results, read.contents[0].text

    tools, resources, results, human = run(main)
    assert tools == TOOLS
    assert resources == ["memgpt-lite://agents/work/core/persona",
                         "memgpt-lite://agents/work/core/human",
                         "memgpt-lite://agents/work/core/project"]
    for i, (name, result, words) in enumerate(results):
        assert result.is_error == (i >= len(GOOD)), (name, text(result))
        assert words in text(result), (name, text(result))
    assert f"in project {tmp_path}" in text(results[0][1])
    assert human == "Name: Ada Lovelace."
    core = memgpt(db_env, "core", "--agent", "work")
    assert core.returncode == 0 and "Name: Ada Lovelace." in core.stdout
    with open_store(db_env.get("MEMGPT_LITE_DATABASE_URL") or config.db_path()) as store:
        row = store.get_agent("work")
        sources = [h["source"] for h in store.block_history(row.id, "human")]
        assert sources == ["init", "mcp:pytest-client", "mcp:pytest-client"]
        assert store.integrity_problems() == []


@pytest.mark.slow
def test_a_closed_stdin_ends_the_server_cleanly(tmp_path):
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "raw-client", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "core_memory_append",
                         "arguments": {"label": "human", "content": "Written before EOF."}}}]
    proc = subprocess.run([*cli_command(), "mcp"], input="".join(
        json.dumps(line) + "\n" for line in lines) + "not json at all\n", capture_output=True,
        text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]  # nothing but protocol
    assert answers[0]["result"]["serverInfo"]["name"] == "memgpt-lite"
    written = [a for a in answers if a.get("id") == 2]
    with open_store() as store:
        value = store.get_block(store.get_agent("default").id, "human").value
        assert store.integrity_problems() == []
    # The call in hand is written whole or not at all; its answer means it was written.
    assert value in ("Written before EOF.", "Nothing is known about the user yet.")
    if written:
        assert written[0]["result"]["isError"] is False and value == "Written before EOF."


@pytest.mark.slow
def test_every_call_read_before_stdin_closed_is_answered():
    """A script pipes its calls in and closes stdin (`memgpt-lite mcp < calls.jsonl`): each
    call is applied, so each must be answered, or the script would do it again."""
    head = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "raw-client", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    calls = [{"jsonrpc": "2.0", "id": i, "method": "tools/call",
              "params": {"name": "core_memory_append",
                         "arguments": {"label": "human", "content": f"line {i}"}}}
             for i in range(2, 22)]
    proc = subprocess.run([*cli_command(), "mcp", "--agent", "work"], input="".join(
        json.dumps(m) + "\n" for m in head + calls), capture_output=True, text=True,
        timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    answers = {a["id"]: a for a in map(json.loads, proc.stdout.splitlines())}
    assert sorted(answers) == list(range(1, 22))
    assert all(answers[i]["result"]["isError"] is False for i in range(2, 22))
    assert human_block().splitlines() == [f"line {i}" for i in range(2, 22)]


@pytest.mark.slow
def test_bytes_that_are_not_utf8_and_lone_surrogates_still_get_an_answer():
    call = (r'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": '
            r'"core_memory_append", "arguments": {"label": "human", "content": '
            r'"cut \ud83d here, a bad byte \xff"}}}').encode().replace(b"\\xff", b"\xff")
    head = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "raw-client", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    view = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "core_memory_view", "arguments": {}}}
    data = b"".join(json.dumps(m).encode() + b"\n" for m in head) + call + b"\n" + \
        json.dumps(view).encode() + b"\n"
    proc = subprocess.Popen([*cli_command(), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    proc.stdin.write(data)  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    answers = {}
    while 3 not in answers:  # stdin stays open until both calls are answered
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, proc.stderr.read()  # type: ignore[union-attr]
        answers[json.loads(line)["id"]] = json.loads(line)
    proc.stdin.close()  # type: ignore[union-attr]
    assert proc.wait(60) == 0
    assert answers[2]["result"]["isError"] is False
    assert "cut \ufffd here, a bad byte \ufffd" in answers[3]["result"]["content"][0]["text"]


@pytest.mark.slow
def test_a_project_folder_whose_name_is_not_utf8_is_served(tmp_path):
    folder = tmp_path / os.fsdecode(b"blog-\xff")  # Linux allows any bytes but / in a name
    folder.mkdir()
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "raw-client", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "core_memory_view", "arguments": {}}},
             {"jsonrpc": "2.0", "id": 3, "method": "resources/list", "params": {}}]
    proc = subprocess.run([*cli_command(), "mcp", "--project", os.fsencode(folder)],
                          input="".join(json.dumps(m) + "\n" for m in lines),
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-600:]
    answers = {a["id"]: a["result"] for a in map(json.loads, proc.stdout.splitlines())}
    shown = str(tmp_path / "blog-\\xff")  # as the project is keyed: \xNN, not U+FFFD
    assert f"in project {shown}:" in answers[2]["content"][0]["text"]
    assert f"scope project ({shown})" in answers[3]["resources"][2]["description"]


class RawServer:
    """`memgpt-lite mcp` spoken to in raw JSON-RPC lines (as any client writes them)."""

    def __init__(self, env: dict[str, str] | None = None, name: str = "raw-client"):
        self.proc = subprocess.Popen([*cli_command(), "mcp", "--agent", "work"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env or dict(os.environ))
        self.next_id = 1
        self.send("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": name, "version": "1"}})
        assert "result" in self.answer()
        self.write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def write(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def send(self, method: str, params: dict) -> None:
        self.write({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.next_id += 1

    def call(self, name: str, args: dict) -> None:
        self.send("tools/call", {"name": name, "arguments": args})

    def answer(self) -> dict:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert line, self.proc.stderr.read()  # type: ignore[union-attr]
        return json.loads(line)


def human_block(env: dict[str, str] | None = None) -> str:
    url = (env or {}).get("MEMGPT_LITE_DATABASE_URL")
    with open_store(url or config.db_path()) as store:
        assert store.integrity_problems() == []
        return store.get_block(store.get_agent("work").id, "human").value


DEEP = "[" * 5000 + "]" * 5000
REFUSED = [  # lines the MCP SDK drops without a word: (line, the id answered, its code)
    (json.dumps([{"jsonrpc": "2.0", "id": 10, "method": "ping"}]), 10, -32600),  # a batch
    (json.dumps({"jsonrpc": "1.0", "id": 11, "method": "ping"}), 11, -32600),
    (json.dumps({"id": "twelve", "method": "ping"}), "twelve", -32600),
    ('{"jsonrpc": "2.0", "id": 13, "method": "tools/list", "params": {"x": ' + DEEP + "}}",
     13, -32700),
    ('{"jsonrpc": "2.0", "method": "ping", "params": {"x": ' + DEEP + '}, "id": 14}', 14,
     -32700),  # its id after the part too deep to parse
    ('{"jsonrpc": "2.0", "id": 15, "method": "tools/ca', 15, -32700),  # cut off
    ('{"jsonrpc": "2.0", "id": 18, "method": "ping", "params": {"s": "\\ud83d", "x": ' + DEEP
     + "}}", 18, -32700),  # a lone surrogate to mend, too deep for Python's json
    (json.dumps({"jsonrpc": "2.0", "id": 16, "method": "tools/list", "params": [1]}), 16,
     -32600),
    ("not json at all", None, None),
    ("[]", None, None),
    (DEEP, None, None),
    (json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), None, None),
    (json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}), None, None),
    (json.dumps({"jsonrpc": "2.0", "id": True, "method": "ping"}), None, None),
    (json.dumps({"jsonrpc": "2.0", "id": {"n": 1}, "method": "ping"}), None, None),
    (json.dumps({"jsonrpc": "2.0", "id": 17, "result": "not an object"}), None, None),
    ('"a string"', None, None),
]


@pytest.mark.slow
def test_every_line_the_sdk_refuses_is_answered_by_its_id_or_noted_on_stderr():
    """A client waiting on a request the SDK dropped waited for ever: each refused line
    with a usable id gets a JSON-RPC error; one without gets one line on stderr; the server
    goes on and answers the next request."""
    server = RawServer()
    answers = {}
    for n, (line, _, _) in enumerate(REFUSED):
        server.proc.stdin.write(line.encode() + b"\n")  # type: ignore[union-attr]
        server.write({"jsonrpc": "2.0", "id": f"ping-{n}", "method": "ping"})
        while f"ping-{n}" not in answers:  # the ping is answered after what came before it
            answer = server.answer()
            assert answer["id"] not in answers, answer
            answers[answer["id"]] = answer
    server.call("core_memory_append", {"label": "human", "content": "Still serving."})
    assert server.answer()["result"]["isError"] is False
    server.proc.stdin.close()  # type: ignore[union-attr]
    assert server.proc.wait(60) == 0
    for line, request_id, code in REFUSED:
        if request_id is not None:
            error = answers.pop(request_id)["error"]
            assert error["code"] == code, (line[:80], error)
            assert error["message"].endswith(".") and error["message"].count(". ") == 0
    assert sorted(answers) == sorted(f"ping-{n}" for n in range(len(REFUSED)))
    notices = server.proc.stderr.read().decode().splitlines()  # type: ignore[union-attr]
    skipped = [n + 3 for n in range(len(REFUSED)) if REFUSED[n][1] is None]
    lines = [2 * n + 3 for n in range(len(REFUSED)) if REFUSED[n][1] is None]
    assert len(notices) == len(skipped), notices
    for number, notice in zip(lines, notices):
        assert notice.startswith(f"memgpt-lite: line {number} of stdin skipped ("), notice
    assert "a JSON-RPC id must be a string or an integer" in notices[4]
    assert "Traceback" not in "".join(notices)
    assert human_block() == "Still serving."


@pytest.mark.slow
def test_the_sdks_own_client_gets_an_error_for_a_request_mangled_on_its_way():
    """A real MCP client whose request reaches the server as `"jsonrpc": "1.0"` (a broken
    proxy between them): its call fails with the server's sentence instead of hanging."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client
    from mcp_types import JSONRPCRequest

    class Mangling:
        def __init__(self, stream):
            self._stream, self.mangled = stream, False

        async def send(self, item):
            message = item.message
            if getattr(message, "method", None) == "tools/call" and not self.mangled:
                self.mangled = True
                item.message = JSONRPCRequest.model_construct(
                    jsonrpc="1.0", id=message.id, method=message.method, params=message.params)
            await self._stream.send(item)

        def __getattr__(self, name):
            return getattr(self._stream, name)

        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            await self._stream.aclose()

    async def main():
        async with stdio_client(server_params(dict(os.environ))) as (read, write):
            async with ClientSession(read, Mangling(write), client_info=CLIENT) as session:
                await session.initialize()
                with anyio.fail_after(60):  # unanswered, it waited for ever
                    with pytest.raises(MCPError) as refused:
                        await session.call_tool("core_memory_view", {})
                    view = await session.call_tool("core_memory_view", {})
                return refused.value.error, text(view)

    error, view = run(main)
    assert error.code == -32600 and '"jsonrpc": "2.0"' in error.message
    assert "Core memory of agent 'work'" in view


MALFORMED = [  # requests the SDK reads but whose params it refuses: (params, words answered)
    ("tools/call", {"arguments": {}}, "params.name is missing"),
    ("tools/call", {"name": 5, "arguments": {}}, "params.name must be a string, got a number"),
    ("resources/read", {}, "params.uri is missing"),
    ("resources/read", {"uri": ["memgpt-lite://agents/work/core/human"]},
     "params.uri must be a string, got an array"),
]
WRONG_ARGUMENTS = [  # a tool call whose arguments are not an object: a tool error
    ({"name": "core_memory_append", "arguments": '{"label": "human", "content": "x"}'},
     "The arguments of core_memory_append must be a JSON object of its inputs, got a string "
     "(send the object itself, not its JSON text)."),
    ({"name": "core_memory_view", "arguments": [1]},
     "The arguments of core_memory_view must be a JSON object of its inputs, got an array."),
]


@pytest.mark.slow
def test_malformed_params_are_one_sentence_and_wrong_arguments_a_tool_error():
    """The SDK answered each of these `Invalid request parameters` with nothing said of what
    was wrong; a request before initialize too."""
    server = RawServer()
    for method, params, _ in MALFORMED:
        server.send(method, params)
    for params, _ in WRONG_ARGUMENTS:
        server.send("tools/call", params)
    answers = {a["id"]: a for a in (server.answer() for _ in MALFORMED + WRONG_ARGUMENTS)}
    for n, (method, _, words) in enumerate(MALFORMED, start=2):
        error = answers[n]["error"]
        assert error["code"] == -32602
        assert error["message"] == f"The {method} request is not valid: {words}.", error
    for n, (_, said) in enumerate(WRONG_ARGUMENTS, start=2 + len(MALFORMED)):
        assert answers[n]["result"] == {"content": [{"type": "text", "text": said}],
                                        "isError": True}
    server.call("core_memory_append", {"label": "human", "content": "Still serving."})
    assert server.answer()["result"]["isError"] is False
    server.proc.stdin.close()  # type: ignore[union-attr]
    assert server.proc.wait(60) == 0
    assert human_block() == "Still serving."


@pytest.mark.slow
def test_a_request_before_initialize_says_to_initialize_first():
    proc = subprocess.run([*cli_command(), "mcp"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ), input="".join(json.dumps(m) + "\n" for m in [
                              {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                              {"jsonrpc": "2.0", "id": 2, "method": "ping"}]))
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert answers == [
        {"jsonrpc": "2.0", "id": 1, "error": {
            "code": -32602, "message": "The session is not initialized yet: send initialize "
                                       "(then notifications/initialized) before tools/list."}},
        {"jsonrpc": "2.0", "id": 2, "result": {}}]
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize("stderr", ["closed", "unread"])
def test_a_notice_that_cannot_be_written_does_not_stop_the_server(stderr):
    """Started with `2>&-`, or with a stderr pipe whose reader is gone: the notice for a
    refused line is lost, and the calls around it are still answered (it stopped the server)."""
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "raw-client", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"}, "not json",
             {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    data = "".join((m if isinstance(m, str) else json.dumps(m)) + "\n" for m in lines)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [*cli_command(), "mcp"] if stderr == "unread" else
            ["sh", "-c", 'exec "$@" 2>&-', "sh", *cli_command(), "mcp"],
            input=data.encode(), stdout=subprocess.PIPE, stderr=write_end, timeout=120,
            env=dict(os.environ))
    finally:
        os.close(write_end)
    assert proc.returncode == 0
    assert sorted(json.loads(line)["id"] for line in proc.stdout.splitlines()) == [1, 2]


@pytest.mark.slow
def test_two_servers_on_one_agent_lose_no_edit(db_env):
    servers = [RawServer(db_env, f"client-{n}") for n in range(2)]
    for i in range(30):  # both write before either is read: their calls race
        for n, server in enumerate(servers):
            server.call("core_memory_append", {"label": "human", "content": f"c{n}-{i}"})
    for server in servers:
        answers = [server.answer() for _ in range(30)]
        assert all(a["result"]["isError"] is False for a in answers), answers[-1]
        server.proc.stdin.close()  # type: ignore[union-attr]
        assert server.proc.wait(60) == 0
    lines = set(human_block(db_env).splitlines())
    assert {f"c{n}-{i}" for n in range(2) for i in range(30)} <= lines


@pytest.mark.slow
def test_a_server_killed_mid_burst_leaves_every_answered_edit_and_nothing_half_written():
    server = RawServer()
    for i in range(300):
        server.call("archival_insert" if i % 2 else "core_memory_append",
                    {"content": f"burst {i}."} if i % 2 else
                    {"label": "human", "content": f"line {i}."})
    answered = [server.answer() for _ in range(40)]
    server.proc.kill()
    server.proc.wait()
    assert all(a["result"]["isError"] is False for a in answered)
    value = human_block()
    with open_store() as store:
        row = store.get_agent("work")
        passages = {p.text for p in store.list_passages(row.id, limit=None)}
        history = store.block_history(row.id, "human")
    done = sorted(a["id"] - 2 for a in answered)  # call i had id i + 2 (initialize had 1)
    for i in done:  # answered in any order: each one is stored
        assert (f"line {i}." in value.splitlines()) if i % 2 == 0 else f"burst {i}." in passages
    assert history[-1]["new_value"] == value  # the last edit and its history went together


@pytest.mark.slow
def test_a_client_gone_before_reading_its_answer_ends_the_server_quietly():
    server = RawServer()
    server.proc.stdout.close()  # type: ignore[union-attr]  # the client dies: no reader
    server.call("archival_insert", {"content": "Stored before the client went away."})
    deadline = time.monotonic() + 60  # a wait for the call to be stored, not a measure
    while not stored_passages() and time.monotonic() < deadline:
        time.sleep(0.05)
    server.proc.stdin.close()  # type: ignore[union-attr]
    # The answer could not be written: the server stops as for `| head`, without a traceback.
    assert server.proc.wait(60) == 1
    assert server.proc.stderr.read() == b""  # type: ignore[union-attr]
    assert stored_passages() == ["Stored before the client went away."]


@pytest.mark.slow
def test_a_client_that_stops_reading_ends_the_server_though_stdin_stays_open():
    server = RawServer()
    server.proc.stdout.close()  # type: ignore[union-attr]  # it reads no more, but keeps writing
    server.call("archival_insert", {"content": "Stored before the client stopped reading."})
    try:  # the server stops at the answer it cannot write, not at the client's next line
        code = server.proc.wait(60)
    finally:
        server.proc.kill()
    assert code == 1 and server.proc.stderr.read() == b""  # type: ignore[union-attr]
    assert stored_passages() == ["Stored before the client stopped reading."]


@pytest.mark.slow
def test_ctrl_c_ends_the_server_at_once():
    server = RawServer()  # run by hand in a terminal: stdin stays open, nothing more is typed
    server.call("core_memory_append", {"label": "human", "content": "Before Ctrl-C."})
    assert server.answer()["result"]["isError"] is False
    server.proc.send_signal(signal.SIGINT)
    try:
        code = server.proc.wait(60)
    finally:
        server.proc.kill()
    assert code == 130
    assert server.proc.stderr.read().decode().strip() == "interrupted"  # type: ignore[union-attr]
    assert human_block().splitlines()[-1] == "Before Ctrl-C."


@pytest.mark.slow
def test_answers_that_cannot_be_written_are_one_sentence():
    head = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw-client", "version": "1"}}}
    with open("/dev/full", "wb") as full:  # stdout where every write fails (ENOSPC)
        proc = subprocess.run([*cli_command(), "mcp"], input=json.dumps(head) + "\n",
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                              env=dict(os.environ))
    assert proc.returncode == 1
    assert proc.stderr == ("memgpt-lite: memgpt-lite mcp could not write its answer to stdout "
                           "(No space left on device).\n")


def stored_passages() -> list[str]:
    with open_store() as store:
        row = store.get_agent("work")
        assert store.integrity_problems() == []
        return [p.text for p in store.list_passages(row.id, limit=None)]


@pytest.mark.slow
def test_forget_while_the_server_runs_reaches_what_it_wrote():
    server = RawServer()
    server.call("core_memory_append", {"label": "human", "content": "Code: tulip-42."})
    server.call("archival_insert", {"content": "The locker code is tulip-42."})
    assert [server.answer()["result"]["isError"] for _ in range(2)] == [False, False]
    forget = subprocess.run([*cli_command(), "forget", "tulip-42", "--yes", "--agent", "work"],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert forget.returncode == 0, forget.stderr
    server.call("archival_search", {"query": "tulip"})
    server.call("core_memory_view", {})
    search, view = (server.answer()["result"]["content"][0]["text"] for _ in range(2))
    assert "No matches" in search and "tulip-42" not in view
    server.proc.stdin.close()  # type: ignore[union-attr]
    assert server.proc.wait(60) == 0
    raw = b"".join(p.read_bytes() for p in config.data_dir().glob("memgpt_lite.db*"))
    assert b"tulip-42" not in raw  # not in the file or its WAL either


@pytest.mark.slow
def test_what_the_server_wrote_while_a_forgets_preview_waited_is_forgotten_too(db_env):
    """The server takes no agent lock: a passage and a core memory line it wrote between
    the preview and the answer to it survived the forget, which did only the preview's
    units. The forget reaches every match the store holds when it runs (docs/forgetting.md)."""
    from memgpt_lite.engine import privacy
    from memgpt_lite.engine.matching import Matcher

    where = db_env.get("MEMGPT_LITE_DATABASE_URL") or config.db_path()

    async def main():
        async with Client(server_params(db_env), client_info=CLIENT) as client:
            await client.call_tool("archival_insert", {"content": "The code is tulip-42."})
            with open_store(where) as store:
                row = store.get_agent("work")
                lock = store.agent_lock("work")  # as `memgpt-lite forget` holds it
                lock.acquire(5)
                try:
                    plan = privacy.plan_forget(store, row, Matcher.build("tulip-42"))
                    assert plan.counts()["passages"] == 1
                    for name, args in (("archival_insert", {"content": "Again: tulip-42."}),
                                       ("core_memory_append", {"label": "human",
                                                               "content": "Code: tulip-42."})):
                        assert not (await client.call_tool(name, args)).is_error
                    result = privacy.forget(store, plan)
                finally:
                    lock.release()
            search = await client.call_tool("archival_search", {"query": "tulip"})
            view = await client.call_tool("core_memory_view", {})
            return result, text(search), text(view)

    result, search, view = run(main)
    assert result.actions()[("passages", "delete")] == 2
    assert result.actions()[("core memory", "remove lines")] == 1
    assert "No matches" in search and "tulip-42" not in view
    core = memgpt(db_env, "core", "--agent", "work")
    assert core.returncode == 0 and "tulip" not in core.stdout


@pytest.mark.slow
def test_a_server_whose_postgres_connection_was_cut_reconnects(pg_url):
    import psycopg

    server = RawServer(dict(os.environ, MEMGPT_LITE_DATABASE_URL=pg_url))
    server.call("core_memory_append", {"label": "human", "content": "Before."})
    assert server.answer()["result"]["isError"] is False
    dbname = psycopg.conninfo.conninfo_to_dict(pg_url)["dbname"]
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as a database restart does
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                     "AND pid <> pg_backend_pid()", (dbname,))
    server.call("core_memory_append", {"label": "human", "content": "Cut off."})
    cut = server.answer()["result"]
    assert cut["isError"] is True and "cannot be used" in cut["content"][0]["text"]
    server.call("core_memory_append", {"label": "human", "content": "After."})
    assert server.answer()["result"]["isError"] is False
    server.proc.stdin.close()  # type: ignore[union-attr]
    assert server.proc.wait(60) == 0
    assert human_block({"MEMGPT_LITE_DATABASE_URL": pg_url}).splitlines() == ["Before.",
                                                                              "After."]


class ChatProcess:
    """`memgpt-lite chat` with piped stdin (one message per line), its stdout read by a
    thread so the test can wait for a reply without blocking forever."""

    def __init__(self, env: dict[str, str], base_url: str):
        self.proc = subprocess.Popen(
            [*cli_command(), "chat", "--agent", "work"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(env, ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY="test"))
        self.out: queue.Queue[str] = queue.Queue()
        self.seen = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.out.put(line)

    def send(self, *messages: str) -> None:
        self.proc.stdin.write("".join(m + "\n" for m in messages))  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def wait_for(self, words: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while words not in self.seen:
            try:
                self.seen += self.out.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
        if words not in self.seen:
            self.proc.kill()
            raise AssertionError(f"no {words!r} from the chat: {self.seen[-300:]!r} "
                                 f"{self.proc.communicate()[1][-600:]!r}")

    def finish(self) -> tuple[int, str]:
        self.proc.stdin.close()  # type: ignore[union-attr]
        code = self.proc.wait(timeout=120)
        return code, self.proc.stderr.read()  # type: ignore[union-attr]


def append(content: str):
    return tool_response([("core_memory_append", {"label": "human", "content": content})])


@pytest.mark.slow
def test_mcp_and_a_running_chat_share_one_agent_without_losing_an_edit(db_env):
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    burst = 4
    reached, go = threading.Event(), threading.Event()

    def tool_call_held_until_the_mcp_edit(body):
        reached.set()
        go.wait(60)
        return append("Chat mid-turn line.")

    async def main(server: FakeAnthropicServer):
        chat = ChatProcess(db_env, server.base_url)
        async with Client(server_params(db_env), client_info=CLIENT) as client:
            server.enqueue(append("Chat line one."))
            server.enqueue(text_response("reply one"))
            chat.send("My first message")
            chat.wait_for("reply one")
            view = text(await client.call_tool("core_memory_view", {}))
            assert "Chat line one." in view  # the chat's edit, seen through MCP
            await client.call_tool("core_memory_append", {"label": "human",
                                                          "content": "MCP line one."})
            server.enqueue(text_response("reply two"))
            chat.send("My second message")
            chat.wait_for("reply two")
            assert "MCP line one." in json.dumps(server.requests[-1]["messages"][-1])
            # An MCP edit made while the chat's turn is between two model calls.
            server.enqueue(tool_call_held_until_the_mcp_edit)
            server.enqueue(text_response("reply three"))
            chat.send("My third message")
            await anyio.to_thread.run_sync(reached.wait, 60)
            await client.call_tool("core_memory_append", {"label": "human",
                                                          "content": "MCP mid-turn line."})
            go.set()
            chat.wait_for("reply three")
            last = json.dumps(server.requests[-1]["messages"][-1])
            assert "MCP mid-turn line." in last and "Chat mid-turn line." in last
            # Both at once: the chat's turns and the MCP client's appends race.
            for i in range(burst):
                server.enqueue(append(f"Chat burst {i}."))
                server.enqueue(text_response(f"burst reply {i}"))
            chat.send(*(f"Burst message {i}" for i in range(burst)))
            for i in range(burst * 3):
                result = await client.call_tool("core_memory_append", {
                    "label": "human", "content": f"MCP burst {i}."})
                assert not result.is_error, text(result)
            await anyio.to_thread.run_sync(chat.wait_for, f"burst reply {burst - 1}")
        return chat.finish()

    with FakeAnthropicServer() as server:
        code, err = run(main, server)
    assert code == 0, err
    core = memgpt(db_env, "core", "--agent", "work")
    lines = ["Chat line one.", "MCP line one.", "MCP mid-turn line.", "Chat mid-turn line.",
             *(f"Chat burst {i}." for i in range(burst)),
             *(f"MCP burst {i}." for i in range(burst * 3))]
    missing = [line for line in lines if line not in core.stdout]
    assert not missing, core.stdout
    recordings = sorted(config.recordings_dir().rglob("*.jsonl"))
    assert len(recordings) == 1
    replayed = memgpt(db_env, "replay", str(recordings[0]), "--strict")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


@pytest.mark.slow
def test_a_new_agent_whose_first_turn_failed_is_kept_when_an_mcp_client_wrote_to_it(db_env):
    """A chat creates agent 'work', an MCP client started meanwhile saves a fact to it, then
    the chat's first turn fails (the key is refused): the chat does not delete the agent
    it created, since the client's acknowledged edit is in it."""
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    reached, go = threading.Event(), threading.Event()
    with FakeAnthropicServer() as server:
        def held_until_the_mcp_edit(body):
            reached.set()
            go.wait(60)
            server.api_key = "another key"  # the chat's next call is refused: the turn fails
            return tool_response([("conversation_search", {"query": "tabs"})])

        server.enqueue(held_until_the_mcp_edit)
        chat = ChatProcess(db_env, server.base_url)
        chat.send("hello")
        assert reached.wait(120), chat.proc.stderr.read()  # type: ignore[union-attr]
        mcp = RawServer(db_env)  # opens the agent the chat created
        mcp.call("core_memory_append", {"label": "human", "content": "Prefers tabs."})
        assert mcp.answer()["result"]["isError"] is False
        go.set()
        code, err = chat.finish()
        mcp.proc.stdin.close()  # type: ignore[union-attr]
        assert mcp.proc.wait(60) == 0
    assert code == 1 and "rejected" in err, err
    assert "was not kept" not in err, err
    assert human_block(db_env).splitlines()[-1] == "Prefers tabs."


@pytest.mark.slow
def test_help_and_chat_never_import_the_sdk():
    from memgpt_lite.lab.fake_server import FakeAnthropicServer

    sdk = ("mcp", "mcp_types", "memgpt_lite.terminal.mcp_server", "memgpt_lite.engine.project",
           "memgpt_lite.engine.memory_service")
    with FakeAnthropicServer() as server:
        env = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="test")
        for args in (["--help"], ["mcp", "--help"], ["chat", "--no-record", "-p", "hello"]):
            proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "memgpt_lite",
                                   *args], capture_output=True, text=True, env=env,
                                  timeout=120)
            assert proc.returncode == 0, proc.stderr[-500:]
            imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                        if line.startswith("import time:")}
            assert "memgpt_lite.terminal.cli" in imported
            # The chat works in a project too: it asks engine/project.py, as the server does.
            allowed = {"memgpt_lite.engine.project"} if args[0] == "chat" else set()
            assert not [m for m in imported if m.split(".")[0] in sdk[:2]
                        or (m in sdk and m not in allowed)], args


def test_an_old_uri_after_a_rename_is_answered_with_the_new_name(service):
    async def main():
        async with Client(build_server(service), mode="legacy") as client:
            with open_store() as other:  # a chat renames the agent meanwhile
                other.rename_agent("work", "home")
            with pytest.raises(MCPError) as info:
                await client.read_resource("memgpt-lite://agents/work/core/human")
            return info.value.error.message

    assert run(main) == ("The agent 'work' was renamed 'home'; its core memory is served "
                         "under the new name (memgpt-lite://agents/home/core/human).")


@pytest.mark.slow
def test_a_name_that_is_no_agent_yet_is_created_and_said_on_stderr():
    """`mcp --agent wrok` (a typo in a client's config) silently served a new, empty agent
    beside 'work'."""
    with open_store() as store:
        MemoryService.open(store, "work", Path.cwd())
    typo = subprocess.run([*cli_command(), "mcp", "--agent", "wrok"], input="",
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert typo.returncode == 0 and typo.stdout == ""
    assert typo.stderr == ("memgpt-lite: mcp created the agent 'wrok' and serves it (no agent "
                           "had that name; close to it: 'work').\n")
    again = subprocess.run([*cli_command(), "mcp", "--agent", "wrok"], input="",
                           capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert again.returncode == 0 and again.stderr == ""  # it exists now: nothing to say
    with open_store() as store:
        assert sorted(a.name for a in store.list_agents()) == ["work", "wrok"]
