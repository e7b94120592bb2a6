"""The start-up and memory sections: `memgpt-lite` run as a user runs it, in subprocesses.

Start-up times `--help` and `chat` to its first prompt (on a pseudo-terminal); memory takes
the peak RSS of a piped chat whose store holds the store section's largest corpus. Both talk
to the local fake server, never the network.
"""

from __future__ import annotations

import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memgpt_lite.lab.bench.plan import BENCH_AGENT, Plan
from memgpt_lite.lab.bench.report import Figure, Row, Section, Target, short_count
from memgpt_lite.lab.bench.store import Corpus


def cli_command() -> list[str]:
    """The installed console script next to this interpreter, else `python -m memgpt_lite`."""
    script = Path(sys.executable).with_name("memgpt-lite")
    if script.exists():
        return [str(script)]
    found = shutil.which("memgpt-lite")
    return [found] if found else [sys.executable, "-m", "memgpt_lite"]


def chat_env(home: Path, base_url: str) -> dict[str, str]:
    return dict(os.environ, MEMGPT_LITE_HOME=str(home), ANTHROPIC_BASE_URL=base_url,
                ANTHROPIC_API_KEY="test", TERM="xterm-256color", COLUMNS="100", LINES="30")


def time_help(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([*cmd, "--help"], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


PROMPT = "you› ".encode()


def time_first_prompt(cmd: list[str], env: dict[str, str],
                      timeout: float = 60) -> tuple[float, float]:
    """`chat` on a pseudo-terminal: seconds until its input prompt is drawn, and the peak
    RSS (MB) of the process, which then gets /exit."""
    master, proc, t = _spawn_chat(cmd, ["--no-record"], env)
    try:
        out = _read_until(master, PROMPT, t + timeout)
        elapsed = time.perf_counter() - t
        if PROMPT not in out:
            raise _stopped(proc, "showed no prompt", timeout, out)
        return elapsed, _exit_chat(master, proc, timeout)
    finally:
        _hang_up(master, proc)


REPLY = "Fake reply to: hello there".encode()


def time_first_reply(cmd: list[str], env: dict[str, str],
                     timeout: float = 60) -> tuple[float, float]:
    """`chat` on a pseudo-terminal with a message typed at once, before the prompt is even
    drawn (as a user who starts typing straight away): seconds until the prompt, and until
    the first words of the reply. The session is recorded, as a chat is by default."""
    master, proc, t = _spawn_chat(cmd, [], env)
    try:
        os.write(master, b"hello there\r")
        out = _read_until(master, PROMPT, t + timeout)
        prompt = time.perf_counter() - t
        out += _read_until(master, REPLY, t + timeout)
        reply = time.perf_counter() - t
        if REPLY not in out:
            raise _stopped(proc, "gave no reply", timeout, out)
        _exit_chat(master, proc, timeout)
        return prompt, reply
    finally:
        _hang_up(master, proc)


def _spawn_chat(cmd: list[str], args: list[str],
                env: dict[str, str]) -> tuple[int, subprocess.Popen, float]:
    """`chat ARGS` on a new pseudo-terminal: its master fd, the process, and when it was
    spawned (perf_counter)."""
    master, slave = os.openpty()
    t = time.perf_counter()
    proc = subprocess.Popen([*cmd, "chat", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=env, start_new_session=True)
    os.close(slave)
    return master, proc, t


def _hang_up(master: int, proc: subprocess.Popen) -> None:
    """Close the chat's terminal; a chat still running (the bench was interrupted or failed
    before /exit) is killed and reaped: in its own session, Ctrl-C never reaches it, and it
    must not outlive the bench or write into the data dir after it is removed."""
    os.close(master)
    if proc.returncode is None and proc.poll() is None:
        proc.kill()
        proc.wait()


def _exit_chat(master: int, proc: subprocess.Popen, timeout: float) -> float:
    """/exit, then the terminal drained until the child closes it (a marker that never
    comes), so a full pty buffer cannot block its exit; its peak RSS (MB)."""
    os.write(master, b"/exit\r")
    _read_until(master, b"\0never", time.perf_counter() + timeout)
    return reap_peak_rss(proc)


def _stopped(proc: subprocess.Popen, what: str, timeout: float, out: bytes) -> RuntimeError:
    """The chat killed, and the error saying what it did not do in time."""
    proc.kill()
    proc.wait()
    return RuntimeError(f"chat {what} within {timeout:.0f} s: {out[-300:]!r}")


def _read_until(fd: int, marker: bytes, deadline: float) -> bytes:
    out = b""
    while marker not in out:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.perf_counter()))
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    return out


def reap_peak_rss(proc: subprocess.Popen) -> float:
    """Wait for the child and return its peak RSS in MB (ru_maxrss is in KiB on Linux);
    os.wait4 gives this one child's figure, unlike RUSAGE_CHILDREN's maximum over all."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{proc.args} exited with status {proc.returncode}")
    return usage.ru_maxrss * 1024 / 1e6


CHAT_LINES = ["Hi! Can you remind me what I said about the garden?",
              "Thanks. Also, Mei moved the budget meeting to Friday.", "/exit"]


def chat_peak_rss(cmd: list[str], env: dict[str, str]) -> float:
    """Peak RSS (MB) of a piped chat (one message per line): two turns against the fake
    server, then /exit."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([*cmd, "chat", "--no-record", "--agent", BENCH_AGENT],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                env=env)
        assert proc.stdin is not None
        proc.stdin.write(("\n".join(CHAT_LINES) + "\n").encode())
        proc.stdin.close()
        try:
            return reap_peak_rss(proc)
        except RuntimeError as exc:
            err.seek(0)
            raise RuntimeError(f"{exc}: {err.read()[-400:].decode(errors='replace')}") from None


def run_startup(plan: Plan, base_url: str, workdir: Path,
                progress: Callable[[str], None]) -> tuple[Section, list[float]]:
    cmd = cli_command()
    helps = [time_help(cmd) for _ in range(plan.help_runs)]
    progress(f"start-up: --help median {statistics.median(helps):.3f} s; timing chat")
    home, firsts, rss = workdir / "startup-home", [], []
    for _ in range(plan.chat_runs):
        elapsed, peak = time_first_prompt(cmd, chat_env(home, base_url))
        firsts.append(elapsed)
        rss.append(peak)
    typed = [time_first_reply(cmd, chat_env(home, base_url)) for _ in range(plan.chat_runs)]
    replies = [reply for _, reply in typed]
    waits = [reply - prompt for prompt, reply in typed]
    progress(f"start-up: first reply typed at once, median {statistics.median(replies):.3f} s")
    shown = " ".join(cmd) if cmd[0] == sys.executable else Path(cmd[0]).name
    method = (f"Wall time of subprocesses of `{shown}` (median of {plan.help_runs} runs for "
              f"--help, {plan.chat_runs} for chat). First prompt: `chat --no-record` on a "
              "pseudo-terminal (stdlib pty) with ANTHROPIC_BASE_URL pointing at the local fake "
              "server and a fresh data dir (the first run creates the agent, later runs resume "
              "it); timed from spawn until the `you›` input prompt is drawn, then /exit. First "
              "reply: `chat` (recorded, as by default) on a pseudo-terminal with a message "
              "written to it at spawn, before the prompt is drawn (a user who types at once); "
              "timed until the fake server's reply appears, and that minus the same run's "
              "first prompt.")
    section = Section("startup", "Start-up", method)
    section.rows = [
        Row("`memgpt-lite --help`", [Figure(round(statistics.median(helps), 3), "s", "median"),
                                     Figure(round(min(helps), 3), "s", "min")],
            Target("median", 0.3, "s")),
        Row("`memgpt-lite chat` to the first prompt",
            [Figure(round(statistics.median(firsts), 3), "s", "median"),
             Figure(round(min(firsts), 3), "s", "min")], Target("median", 0.6, "s")),
        Row("first reply when the user types at once (the SDK is imported meanwhile)",
            [Figure(round(statistics.median(replies), 3), "s", "median"),
             Figure(round(statistics.median(waits), 3), "s", "after the prompt")],
            Target("after the prompt", 1.0, "s")),
    ]
    section.data = {"command": cmd, "help_s": [round(x, 4) for x in helps],
                    "first_prompt_s": [round(x, 4) for x in firsts],
                    "first_reply_s": [round(x, 4) for x in replies],
                    "reply_after_prompt_s": [round(x, 4) for x in waits]}
    return section, rss


def run_memory(corpus: Corpus, server: Any, startup_rss: list[float],
               progress: Callable[[str], None]) -> Section:
    seen = len(server.requests)
    rss = chat_peak_rss(cli_command(), chat_env(corpus.home, server.base_url))
    requests = len(server.requests) - seen
    progress(f"memory: chat peak RSS {rss:.1f} MB with {corpus.messages:,} messages")
    method = ("Peak RSS (VmHWM, from os.wait4's ru_maxrss of that one child) of `memgpt-lite chat "
              f"--no-record --agent {BENCH_AGENT}`, piped: {len(CHAT_LINES) - 1} messages, then "
              f"/exit, against the local fake server, on the English data dir after the engine "
              f"section ({short_count(corpus.messages)} messages, "
              f"{short_count(corpus.passages)} passages, a full queue). For comparison, the "
              "start-up runs' peak on an empty data dir.")
    section = Section("memory", "Peak memory", method)
    section.rows = [
        Row(f"chat process, {short_count(corpus.messages)} messages + "
            f"{short_count(corpus.passages)} passages in the store",
            [Figure(round(rss, 1), "MB", "peak RSS")], Target("peak RSS", 150, "MB")),
        Row("chat process, empty store, to the first prompt",
            [Figure(round(max(startup_rss), 1), "MB", "peak RSS")]),
    ]
    section.data = {"peak_rss_mb": round(rss, 2), "model_requests": requests,
                    "empty_store_peak_rss_mb": [round(x, 2) for x in startup_rss],
                    "messages": corpus.messages, "passages": corpus.passages}
    return section
