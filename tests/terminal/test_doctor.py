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


def test_a_web_page_at_the_base_url_is_a_warning_the_verdict_does_not_hide(capsys, monkeypatch):
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = b"<html><body>Welcome to nginx</body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        assert cli.main(["doctor"]) == 0  # it answers: a compatible server may lack counting
    finally:
        server.shutdown()
        server.server_close()
    out = " ".join(capsys.readouterr().out.split())
    assert "answered a token count with no count in it" in out and "Traceback" not in out
    assert out.endswith("Nothing is broken; 1 warning(s) above.")
