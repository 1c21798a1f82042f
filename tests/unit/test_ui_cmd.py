"""``bench ui``: the port is checked (in range, free) before MLflow's server starts; a server that stops is no success.

The server is never started for real: ``subprocess.Popen`` is replaced by a stand-in.
"""

from __future__ import annotations

import socket
import subprocess

import pytest

from bench.cli import main
from bench.cli import ui_cmd


class FakeServer:
    """Stands in for the MLflow server process: ``wait`` returns ``status`` or raises it."""

    def __init__(self, status):
        self.status, self.terminated = status, False

    def wait(self, timeout=None):
        if isinstance(self.status, BaseException) and not self.terminated:
            raise self.status
        return 0 if self.terminated else self.status

    def terminate(self):
        self.terminated = True

    def kill(self):
        self.terminated = True


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from bench.tracking import Tracker

    path = tmp_path_factory.mktemp("ui") / "results"
    Tracker(path)
    return path


@pytest.fixture
def servers(monkeypatch):
    """Records the servers started; each exits with the status pushed on the list first (default: Ctrl-C)."""
    started, statuses = [], []

    def popen(command, env=None):
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
    assert "MLflow UI for" in out
    assert err == f"bench: error: the MLflow server stopped by itself (exit status {status}; its log is above)\n"


def test_ctrl_c_stops_the_server_and_succeeds(capsys, results, servers):
    assert main(["ui", "--port", str(free_port()), "--results-dir", str(results)]) == 0
    assert servers[0][0].terminated


def test_check_free_takes_no_port(tmp_path):
    port = free_port()
    ui_cmd.check_free(port)
    ui_cmd.check_free(port)
