"""`memgpt-lite mcp` from spawn to its first answers, started as an MCP client starts it: a
subprocess spoken to over its stdin and stdout in JSON-RPC lines (the bench itself needs no
SDK; the server needs the `mcp` extra).

Each run spawns the server on one data dir (the first run creates the agent), sends
`initialize` and times its answer, then `notifications/initialized` and a `core_memory_view`
call and times that answer, then closes stdin: the server must exit 0. For comparison, the
interpreter alone and the SDK's own import, each in a fresh process: what of the start-up
is ours and what is the SDK's.

    memgpt-lite bench mcp [--runs N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memgpt_lite.lab.bench.report import Figure, Row, Section, render_markdown
from memgpt_lite.lab.bench.stats import machine_info
from memgpt_lite.lab.bench.startup import cli_command

AGENT = "bench"
SDK_IMPORT = "import mcp.server.lowlevel.server, mcp.server.stdio"


def _request(id_: int, method: str, params: dict[str, Any]) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
            + "\n").encode()


INITIALIZE = _request(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                        "clientInfo": {"name": "memgpt-lite-bench",
                                                       "version": "1"}})
INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
VIEW = _request(2, "tools/call", {"name": "core_memory_view", "arguments": {}})


def sdk_installed() -> bool:
    found = subprocess.run([sys.executable, "-c", "import mcp.server.lowlevel.server"],
                           capture_output=True)
    return found.returncode == 0


def time_first_answers(cmd: list[str], env: dict[str, str],
                       timeout: float = 60) -> tuple[float, float]:
    """Seconds from spawn to the initialize answer and to the first tool answer."""
    t = time.perf_counter()
    proc = subprocess.Popen([*cmd, "mcp", "--agent", AGENT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        _answer(proc, 1, t + timeout)
        first = time.perf_counter() - t
        proc.stdin.write(INITIALIZED + VIEW)
        proc.stdin.flush()
        result = _answer(proc, 2, t + timeout)
        tool = time.perf_counter() - t
        if result.get("result", {}).get("isError") is not False:
            raise RuntimeError(f"core_memory_view failed: {result}")
        proc.stdin.close()
        if proc.wait(timeout) != 0:
            raise RuntimeError(f"mcp exited with {proc.returncode}: {_stderr(proc)}")
        return first, tool
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _answer(proc: subprocess.Popen, id_: int, deadline: float) -> dict[str, Any]:
    """The JSON-RPC answer to request `id_` (notifications before it are skipped)."""
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    buffered = b""
    while True:
        while b"\n" not in buffered:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.perf_counter()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                raise RuntimeError(f"mcp gave no answer to request {id_}: {_stderr(proc)}")
            buffered += chunk
        line, buffered = buffered.split(b"\n", 1)
        message = json.loads(line)
        if message.get("id") == id_:
            return message


def _stderr(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.kill()
    return proc.communicate()[1].decode(errors="replace")[-400:]  # type: ignore[union-attr]


def time_python(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t


def run_mcp_startup(runs: int, workdir: Path, base_env: dict[str, str] | None = None) -> Section:
    """The section (rows empty, with a note, when the SDK is not installed)."""
    cmd = cli_command()
    section = Section("mcp", "MCP server start-up", _method(runs))
    if not sdk_installed():
        section.method += " Skipped: the MCP SDK is not installed (pip install " \
                          "'memgpt-lite[mcp]')."
        return section
    env = dict(base_env or os.environ, MEMGPT_LITE_HOME=str(workdir / "mcp-home"))
    env.pop("MEMGPT_LITE_DATABASE_URL", None)
    answers = [time_first_answers(cmd, env) for _ in range(runs)]
    bare = [time_python("pass") for _ in range(runs)]
    sdk = [time_python(SDK_IMPORT) for _ in range(runs)]
    section.rows = [
        _row("`memgpt-lite mcp` to its initialize answer", [a[0] for a in answers]),
        _row("`memgpt-lite mcp` to its first tool answer (core_memory_view)",
             [a[1] for a in answers]),
        _row("for comparison: the MCP SDK's import alone", sdk),
        _row("for comparison: the Python interpreter alone", bare),
    ]
    section.data = {"command": cmd, "initialize_s": [round(a[0], 4) for a in answers],
                    "first_tool_s": [round(a[1], 4) for a in answers],
                    "sdk_import_s": [round(x, 4) for x in sdk],
                    "python_s": [round(x, 4) for x in bare]}
    return section


def _row(label: str, seconds: list[float]) -> Row:
    return Row(label, [Figure(round(statistics.median(seconds), 3), "s", "median"),
                       Figure(round(min(seconds), 3), "s", "min")])


def _method(runs: int) -> str:
    return (f"Wall time of subprocesses (median and min of {runs} runs) on a fresh data dir (the "
            "first run creates the agent). The server is spawned with pipes as an MCP client "
            "spawns it and spoken to in JSON-RPC lines: `initialize` is sent at once and its "
            "answer timed; then `notifications/initialized` and a `core_memory_view` call, "
            "whose answer is the first tool answer; then stdin is closed and the server exits "
            "0. The comparison rows run `python -c` in a fresh process: `pass`, and "
            f"`{SDK_IMPORT}`.")


def mcp_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memgpt-lite bench mcp",
        description="time `memgpt-lite mcp` from spawn to its first answers",
        epilog="examples:\n  memgpt-lite bench mcp\n  memgpt-lite bench mcp --runs 10 --json "
               "mcp.json", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, metavar="N", help="runs (default 5)")
    parser.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT")
    return parser


def mcp_main(argv: list[str]) -> int:
    parser = mcp_parser()
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memgpt-lite-bench-mcp-") as tmp:
        section = run_mcp_startup(args.runs, Path(tmp))
    section.seconds = time.perf_counter() - started
    report = {"version": _version(), "seconds": section.seconds, "machine": machine_info(),
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "sections": [section.to_dict()]}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(render_markdown(report, " ".join(["memgpt-lite bench mcp", *argv])))
    return 0


def _version() -> str:
    from memgpt_lite import __version__

    return __version__
