"""`memgpt-lite doctor`'s connection check against a server that never answers: how long
it waits, and that its sentence names what set that wait."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from memgpt_lite.terminal import cli, doctor


@pytest.fixture
def silent_server(monkeypatch) -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        host = f"127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://{host}")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        yield host


def test_the_connection_check_waits_the_chats_shorter_deadline(silent_server, capsys,
                                                                monkeypatch):
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "0.5")
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  the connection: Gave up waiting for {silent_server}: it timed out" in out
    assert "a call may take 0.5 s, set by MEMGPT_LITE_TIMEOUT)" in out


def test_doctors_own_limit_is_not_blamed_on_a_setting(silent_server, capsys, monkeypatch):
    monkeypatch.setattr(doctor, "CHECK_WAIT", 0.5)
    assert cli.main(["doctor"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert ("a call may take 0.5 s, doctor's own limit; a chat waits up to 120 s, set by "
            "MEMGPT_LITE_TIMEOUT or --timeout)") in out


def test_a_timeout_setting_the_chat_refuses_is_a_problem(silent_server, capsys,
                                                         monkeypatch):
    monkeypatch.setattr(doctor, "CHECK_WAIT", 0.5)
    monkeypatch.setenv("MEMGPT_LITE_TIMEOUT", "soon")
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  MEMGPT_LITE_TIMEOUT must be a number of seconds" in out
    assert "2 problem(s) found." in out
