"""``bench ui``: the port is checked (in range, free) before MLflow's server starts; a server that stops is no success.

The server is never started for real: ``subprocess.Popen`` is replaced by a stand-in.
"""

from __future__ import annotations

import socket
import subprocess

import pytest

from bench.cli import main, ui_cmd


class FakeServer:
    """Stands in for the MLflow server process: ``wait`` returns ``status`` or raises it."""

    def __init__(self, status):
        self.status, self.terminated = status, False

    def wait(self, timeout=None):
        if isinstance(self.status, BaseException) and not self.terminated:
            raise self.status
        return 0 if self.terminated else self.status

    def poll(self):
        """As ``wait`` without blocking: Ctrl-C arrives while ``bench ui`` waits for the server to answer."""
        return self.wait()

    def terminate(self):
        self.terminated = True

    def kill(self):
        self.terminated = True


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from bench.storage.tracking import Tracker

    path = tmp_path_factory.mktemp("ui") / "results"
    Tracker(path)
    return path


@pytest.fixture
def servers(monkeypatch):
    """Records the servers started; each exits with the status pushed on the list first (default: Ctrl-C)."""
    started, statuses = [], []

    def popen(command, env=None, **streams):
        started.append(FakeServer(statuses.pop(0) if statuses else KeyboardInterrupt()))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)
    return started, statuses


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_port_in_use_is_one_line_and_starts_nothing(capsys, results, servers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["ui", "--port", str(port), "--results-dir", str(results)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and not servers[0]
    assert err == f"bench: error: cannot listen on 127.0.0.1:{port}: Address already in use (pass another --port)\n"


@pytest.mark.parametrize("port", ["0", "-1", "70000"])
def test_a_port_out_of_range_is_one_line(capsys, results, servers, port):
    assert main(["ui", "--port", port, "--results-dir", str(results)]) == 2
    assert capsys.readouterr().err == f"bench: error: --port must be in 1..65535, got {port}\n"
    assert not servers[0]


@pytest.mark.parametrize("status", [0, 1, -9])
def test_a_server_that_stops_by_itself_is_no_success(capsys, results, servers, status):
    servers[1].append(status)
    assert main(["ui", "--port", str(free_port()), "--results-dir", str(results)]) == 1
    out, err = capsys.readouterr()
    assert "MLflow UI for" not in out  # it never answered: no address to open
    assert err == f"bench: error: the MLflow server stopped by itself (exit status {status}; its log is above)\n"


def test_ctrl_c_stops_the_server_and_succeeds(capsys, results, servers):
    assert main(["ui", "--port", str(free_port()), "--results-dir", str(results)]) == 0
    assert servers[0][0].terminated


def test_check_free_takes_no_port(tmp_path):
    port = free_port()
    ui_cmd.check_free(port)
    ui_cmd.check_free(port)


def test_the_address_is_printed_only_once_the_server_answers(capsys, results, monkeypatch):
    import http.server
    import threading

    served = []

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            served.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass

    class Starting(FakeServer):
        """A server that starts listening some polls after it was launched, then runs until Ctrl-C."""

        def __init__(self, port):
            super().__init__(None)
            self.port, self.polls, self.http = port, 0, None

        def poll(self):
            self.polls += 1
            if self.polls == 3:
                self.http = http.server.HTTPServer(("127.0.0.1", self.port), Health)
                threading.Thread(target=self.http.serve_forever, daemon=True).start()
            return None

        def wait(self, timeout=None):
            if not self.terminated:
                assert served, "the address was printed before the server answered"
                raise KeyboardInterrupt
            self.http.shutdown()
            self.http.server_close()
            return 0

    port = free_port()
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda command, env=None, **streams: started.append(Starting(port)) or started[-1])
    assert main(["ui", "--port", str(port), "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert served == ["/health"] and started[0].polls >= 3
    assert f"http://127.0.0.1:{port}/#/experiments/" in out and "workflowType=machine_learning" in out
