"""`memgpt-lite mcp`: an agent's memory served over stdio to MCP clients (Claude Code, Claude
Desktop, Cursor, VS Code), on the official MCP Python SDK (the optional extra `mcp`; see
docs/mcp.md).

This module is the SDK's side only: the tools, their errors and the resources come from
`engine/memory_service.py`, which runs the chat's own memory tools. Imported only when the
command runs (cli.py says which extra to install when the SDK is missing), so `--help` and
`chat` never load the SDK.

Calls are served one at a time on the event loop: the store's connection belongs to one
thread, and a memory call takes milliseconds. A closed stdin ends the server once every
request read before it is answered (`Answers`); stdout carries nothing but the protocol.
"""

from __future__ import annotations

import codecs
import collections
import contextvars
import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import INVALID_PARAMS, INVALID_REQUEST
from pydantic import ValidationError

from memgpt_lite import __version__
from memgpt_lite.engine.memory_service import (
    TOOL_NAMES,
    MemoryService,
    OutsideTool,
    author_of,
    outside_tools,
)
from memgpt_lite.engine.store.base import StoreError
from memgpt_lite.engine.text import clean_value, shorten
from memgpt_lite.terminal import agent_checks
from memgpt_lite.terminal.exit_codes import EXIT_USAGE, UserError
from memgpt_lite.terminal.mcp_refusals import (
    Refusal,
    arguments_problem,
    misread_id,
    params_problem,
    refusal,
)

SERVER_NAME = "memgpt-lite"
TEXT = "text/plain"


def run_mcp(agent_name: str, project: str | None) -> int:
    """Serve agent `agent_name`'s memory on stdin/stdout until the client closes stdin."""
    from memgpt_lite.engine.project import project_root
    from memgpt_lite.engine.store import open_store

    _check_pipes()
    root = project_root(project)  # a bad --project is one sentence before anything opens
    store = open_store()
    try:
        agent_checks.refuse_renamed(store, agent_name, "mcp")
        service = MemoryService.open(store, agent_name, root)
    except BaseException:
        store.close()
        raise
    try:
        if service.created:
            _say_created(store, service.row.name)
        _attach_dense(service)
        anyio.run(serve, build_server(service))
    except BaseExceptionGroup as group:
        # A client that went away before reading an answer breaks the pipe inside the SDK's
        # task group; unwrapped, the command line stops quietly, as for `| head`. Any other
        # failure to write an answer (a full disk or a device error where stdout goes) is
        # one sentence.
        failed, rest = group.split(OSError)
        if failed is None or rest is not None:
            raise
        first = failed.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        if isinstance(first, BrokenPipeError):
            raise BrokenPipeError from None
        raise UserError(f"memgpt-lite mcp could not write its answer to stdout "
                        f"({getattr(first, 'strerror', None) or first}).") from None
    finally:
        service.close()  # the store it runs on now (a new one after a reconnect)
    return 0


def _say_created(store: Any, name: str) -> None:
    """One line on stderr for an agent this start created (as documented) beside others: a
    typo in a client's config would otherwise serve a new, empty memory unseen. Names the
    agents whose names are close to it, the likely meant ones."""
    import difflib

    others = [a.name for a in store.list_agents() if a.name != name]
    if not others:  # the first agent of this data dir: nothing to mistype (as the chat)
        return
    close = difflib.get_close_matches(name, others, n=3, cutoff=0.6)
    if close:
        known = "; close to it: " + ", ".join(repr(n) for n in close)
    else:
        known = "; the agents here: " + ", ".join(repr(n) for n in others[:5]) + (
            ", …" if len(others) > 5 else "")
    # repr: names are quoted with any control character escaped (no rich at start-up)
    _notice(f"memgpt-lite: mcp created the agent {name!r} and serves it (no agent had that "
            f"name{known}).")


def _check_pipes() -> None:
    """The protocol's two pipes, before anything opens: started with one closed (`>&-`),
    Python has no sys.stdout (or stdin), and the SDK would fail with a traceback."""
    closed = [name for name in ("stdin", "stdout") if getattr(sys, name) is None]
    if closed:
        raise UserError(f"memgpt-lite mcp talks to its MCP client over stdin and stdout, and "
                        f"its {closed[0]} is closed; let the client start it (claude mcp add "
                        "memgpt-lite -- memgpt-lite mcp).", EXIT_USAGE)


def _attach_dense(service: MemoryService) -> None:
    """Hybrid search, chosen as the chat chooses it (searches only: the chat's indexer or
    `memgpt-lite index` embeds what is stored here)."""
    from memgpt_lite.engine.dense import DenseRecall
    from memgpt_lite.terminal.embedding_commands import wanted_embedder

    embedder = wanted_embedder()
    if embedder is not None:
        service.tools.dense = DenseRecall(service.store, service.row.id, embedder)


async def serve(server: Server[Any], stdin: Any = None) -> None:
    answers = Answers()
    lines = RepairedLines(stdin if stdin is not None else sys.stdin.buffer, answers)
    async with stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
        watched = answers.watching(write)  # before any await: no line is read before it
        await server.run(read, watched, server.create_initialization_options())


class Answers:
    """The requests read and not answered yet, by id. At the end of input the SDK cancels
    the answers still to be written, though each call was applied: a script that pipes its
    calls in and closes stdin lost their answers, and would do them again. So the end of
    input is handed on only once every request read has its answer (or was cancelled by the
    client), or when none has come for IDLE seconds (a request the SDK drops unanswered)."""

    IDLE = 30.0

    def __init__(self) -> None:
        self.pending: collections.Counter[object] = collections.Counter()
        self._changed = anyio.Event()
        self._stream: Any = None

    def read(self, line: str) -> Refusal | None:
        """Note a request read; what to say of a line the SDK would drop without a word."""
        try:  # the SDK's own reading of a line, so only what it answers is waited for
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except Exception as error:  # as the SDK catches it
            return refusal(line, error)
        if isinstance(message, types.JSONRPCNotification) and (wrong := misread_id(line)):
            return wrong
        if isinstance(message, types.JSONRPCRequest):
            self.pending[message.id] += 1
        elif (isinstance(message, types.JSONRPCNotification)
              and message.method == "notifications/cancelled"):
            self.answered((message.params or {}).get("requestId"))
        return None

    async def refuse(self, said: Refusal, number: int) -> None:
        """A line the SDK refused: an error answer to each request id it carries, so that no
        client waits for ever, else a notice on stderr (stdout carries only the protocol)."""
        for request_id in said.ids:
            await self._stream.send(SessionMessage(types.JSONRPCError(
                jsonrpc="2.0", id=request_id,
                error=types.ErrorData(code=said.code, message=said.message))))
        if not said.ids:
            _notice(f"memgpt-lite: line {number} of stdin skipped ({said.unanswered}): "
                    f"{said.message}")

    def answered(self, request_id: object) -> None:
        if self.pending[request_id] > 0:
            self.pending[request_id] -= 1
            self._changed.set()
        self.pending = +self.pending  # no ids kept at zero

    async def all_answered(self) -> None:
        while self.pending:
            self._changed = anyio.Event()
            with anyio.move_on_after(self.IDLE) as idle:
                await self._changed.wait()
            if idle.cancelled_caught:
                return

    def watching(self, stream: Any) -> Any:
        self._stream = stream  # where refused lines are answered too
        return _WatchedWrites(stream, self)


def _notice(line: str) -> None:
    """A line on stderr, which clients log; a stderr closed (`2>&-`) or a pipe nobody reads
    is no reason to stop serving."""
    if sys.stderr is None:  # print() would fall back on stdout, the protocol's own pipe
        return
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class _WatchedWrites:
    """The server's write stream, noting the id of each answer on its way to stdout."""

    def __init__(self, stream: Any, answers: Answers):
        self._stream, self._answers = stream, answers

    async def send(self, item: Any) -> None:
        await self._stream.send(item)
        message = getattr(item, "message", None)
        if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
            self._answers.answered(message.id)

    def close(self) -> None:
        self._stream.close()

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _WatchedWrites:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class RepairedLines:
    """The client's lines, read as UTF-8 (a bad byte becomes U+FFFD), with lone surrogates
    written as JSON escapes (`\\ud800`, what a JavaScript client sends for a string cut
    between the two halves of an emoji) made U+FFFD and a leading byte-order mark dropped:
    the SDK's parser refuses both, and the request would never be answered.

    A daemon thread of its own reads them: a read blocked on a pipe cannot be cancelled, and
    in one of anyio's worker threads it held the process after Ctrl-C or an answer the
    client no longer read, until the client wrote again or closed stdin."""

    def __init__(self, binary: Any, answers: Answers | None = None):
        self._binary, self._answers = binary, answers or Answers()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        send, receive = anyio.create_memory_object_stream[str](16)
        token = anyio.lowlevel.current_token()
        reader = threading.Thread(target=_read_lines, args=(self._binary.fileno(), send, token),
                                  daemon=True, name="memgpt-lite mcp stdin")
        reader.start()
        number = 0  # of the line, for the notices
        async with receive:
            async for line in receive:
                number += 1
                line = repaired(line)
                refused = self._answers.read(line)
                if refused is None:
                    yield line
                else:  # the SDK would drop it unanswered
                    await self._answers.refuse(refused, number)
        await self._answers.all_answered()  # then the SDK may end the session


def _read_lines(fd: int, send: Any, token: Any) -> None:
    """Hand each line to the event loop, then the end of input; stop quietly once the server
    has stopped listening (its loop closed, or the stream's reader gone). Plain reads of the
    descriptor: a buffered file blocked in this thread would abort the interpreter's exit."""
    try:
        for line in _split_lines(fd):
            _hand_over(send, line, token)
        anyio.from_thread.run_sync(send.close, token=token)
    except (RuntimeError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


def _hand_over(send: Any, line: str, token: Any) -> None:
    """`send_nowait` run in the loop, retried while the buffer is full: a plain function, not
    `from_thread.run(send.send)`, whose coroutine, made just as the loop closed (the client
    gone), was never awaited and printed a RuntimeWarning on a server meant to end quietly."""
    while True:
        try:
            anyio.from_thread.run_sync(send.send_nowait, line, token=token)
            return
        except anyio.WouldBlock:
            time.sleep(0.005)  # the server is busy with earlier lines: backpressure


def _split_lines(fd: int) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    parts: list[str] = []  # of the line not yet ended (one long line is joined once)
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            chunk = b""  # a pipe that fails is an ended one
        text = decoder.decode(chunk, final=not chunk)
        *ended, rest = text.split("\n")
        if ended:
            yield "".join(parts) + ended[0] + "\n"
            yield from (line + "\n" for line in ended[1:])
            parts = []
        parts.append(rest)
        if not chunk:
            if "".join(parts):
                yield "".join(parts)
            return


def repaired(line: str) -> str:
    # A byte-order mark (a calls.jsonl saved by Notepad) is no JSON to the SDK: the file's
    # first request, its initialize, went unanswered.
    line = line.removeprefix("\ufeff")
    if "\\ud" not in line.lower():  # the common case: nothing to look at
        return line
    try:
        message = json.loads(line)
        clean = clean_value(message)
    except (ValueError, RecursionError):  # not JSON, or nested past Python's own stack (it
        return line                       # stopped the server): refused as it is, and said so
    return line if clean is message else json.dumps(clean, ensure_ascii=False) + "\n"


def build_server(service: MemoryService) -> Server[Any]:
    """The SDK's low-level server over `service`: the tools keep the chat's exact input
    schemas (a generated schema would drift from them), and every tool mistake comes back
    as a result with isError set."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(t) for t in outside_tools()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        wrong = WRONG_ARGUMENTS.get()
        if wrong and params.name in TOOL_NAMES:  # arguments not an object (see PlainParams)
            return types.CallToolResult(content=[types.TextContent(type="text", text=wrong)],
                                        is_error=True)
        settle(service)
        outcome = service.call(params.name, params.arguments, author=author_of(client_name(ctx)))
        return types.CallToolResult(content=[types.TextContent(type="text", text=outcome.text)],
                                    is_error=outcome.is_error)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        settle(service)
        _refuse_if_gone(service)
        return types.ListResourcesResult(resources=[
            types.Resource(uri=r.uri, name=r.label, title=f"core memory: {r.label}",
                           description=r.description, mime_type=TEXT)
            for r in service.resources()])

    async def read_resource(ctx: Any,
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        settle(service)
        _refuse_if_gone(service)
        found = service.read(str(params.uri))
        if found is None:
            raise _no_block(service, str(params.uri))
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=found.uri, text=found.text, mime_type=TEXT)])

    async def list_resource_templates(ctx: Any,
                                      params: Any) -> types.ListResourceTemplatesResult:
        # Every block is listed whole, so there are none; clients that offer resources ask
        # (Inspector, Claude Desktop) and would show "Method not found" as an error.
        return types.ListResourceTemplatesResult(resource_templates=[])

    server = Server(SERVER_NAME, version=__version__, title="memgpt-lite memory",
                    instructions=service.instructions(), on_list_tools=list_tools,
                    on_call_tool=call_tool, on_list_resources=list_resources,
                    on_list_resource_templates=list_resource_templates,
                    on_read_resource=read_resource)
    server.middleware.append(PlainParams(server))
    return server


class PlainParams:
    """The SDK answers params it cannot validate, and any request before `initialize`, with
    "Invalid request parameters" alone; a client (or the agent behind it) cannot tell what
    to fix. This says it in one sentence, and a tool call whose arguments are not an object
    gets a tool error, as every other wrong argument does: it reaches `call_tool` with no
    arguments, and `WRONG_ARGUMENTS` says why."""

    VAGUE = "Invalid request parameters"

    def __init__(self, server: Server[Any]):
        self._server = server

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params
        if (ctx.method == "tools/call" and isinstance(params, dict)
                and params.get("arguments") is not None
                and not isinstance(params["arguments"], dict)):
            token = WRONG_ARGUMENTS.set(arguments_problem(str(params.get("name")),
                                                          params["arguments"]))
            try:
                return await self._called(dataclasses.replace(
                    ctx, params={**params, "arguments": None}), call_next)
            finally:
                WRONG_ARGUMENTS.reset(token)
        return await self._called(ctx, call_next)

    async def _called(self, ctx: Any, call_next: Any) -> Any:
        try:
            return await call_next(ctx)
        except ValidationError as error:
            if error.errors()[0]["loc"][:1] == ("params",):  # the SDK's check of the request
                raise MCPError(INVALID_PARAMS, params_problem(ctx.method, error)) from None
            self._refuse_params(ctx.method, ctx.params)
            raise  # the params validate: a failure of the server's own making
        except MCPError as error:
            if error.error.message != self.VAGUE:
                raise
            self._refuse_params(ctx.method, ctx.params)
            raise MCPError(INVALID_PARAMS, "The session is not initialized yet: send initialize "
                           f"(then notifications/initialized) before {ctx.method}.") from None

    def _refuse_params(self, method: str, params: Any) -> None:
        """An MCPError naming what is wrong with `params`; nothing when they validate."""
        entry = self._server.get_request_handler(method)
        kind = types.InitializeRequestParams if method == "initialize" else (
            entry.params_type if entry is not None else None)
        try:
            if kind is not None:
                kind.model_validate({} if params is None else params, by_name=False)
        except ValidationError as error:
            raise MCPError(INVALID_PARAMS, params_problem(method, error)) from None


WRONG_ARGUMENTS: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "WRONG_ARGUMENTS", default=None)


def _no_block(service: MemoryService, uri: str) -> MCPError:
    """A resource URI that names no block; as sent, cut short: a client may send megabytes."""
    return MCPError(INVALID_PARAMS, service.moved(uri) or (
        f"There is no core memory block at {shorten(uri, 200)}; resources/list names the "
        "blocks."))


def _refuse_if_gone(service: MemoryService) -> None:
    """Resources of an agent deleted meanwhile: the tools' sentence, not an empty list."""
    gone = service.gone()
    if gone:
        raise MCPError(INVALID_REQUEST, gone)


def settle(service: MemoryService) -> None:
    """Before reading or writing, undo a turn a dead chat left cut off (kill -9), as every
    reader does, so that no edit lands on effects its undo would take back; only when no
    process holds the agent: a running chat's open turn is real until it ends."""
    from memgpt_lite.terminal.agent_checks import settle as settle_agent

    try:
        if service.refresh():
            settle_agent(service.store, service.row)
    except StoreError:
        pass  # the call itself meets the store's failure and says so


def _tool(tool: OutsideTool) -> types.Tool:
    hints = types.ToolAnnotations(read_only_hint=tool.read_only,
                                  destructive_hint=None if tool.read_only else
                                  tool.name not in ("core_memory_append", "archival_insert"))
    return types.Tool(name=tool.name, description=tool.description,
                      input_schema=tool.input_schema, annotations=hints)


def client_name(ctx: Any) -> str | None:
    """The client's name from its clientInfo (the initialize handshake, or the request's
    envelope on newer protocol versions); None when it sent none."""
    params = getattr(getattr(ctx, "session", None), "client_params", None)
    info = getattr(params, "client_info", None)
    return getattr(info, "name", None)

