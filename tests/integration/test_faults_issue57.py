"""Issue 57's faults: each a user's mistake that cost data, ran the wrong thing, or left processes behind.

- ``bench cache clean`` removes only what the cache wrote; a user's files in the folder stay.
- ``bench cache verify|clean`` on a folder that does not exist is an error.
- ``bench submit --name`` refuses an empty name and names that are paths.
- An option that takes one value, given twice, is refused (argparse keeps the last).
- A ``--mechanism-file`` that registers no mechanism is refused, naming the file.
- ``bench grid --executor ray`` without Ray is refused before the tracking store is created.
- ``bench tune --param block=0`` names the parameter, its value and its range.
- SIGTERM/SIGINT to ``bench ui`` takes MLflow's server and its children down, freeing the port.

Every error is one line on stderr and exit status 2, before any work.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.cli import main, ui_cmd
from tests.integration.test_bad_inputs import run_cli

FS = "fewshot_synth_faces"


def one_line_error(code: int, out: str, err: str, *phrases: str) -> None:
    assert code == 2, (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for phrase in phrases:
        assert phrase in err, (phrase, err)


# --- 1. cache clean removes only what the cache wrote -----------------------------------------


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder of a user's files, used as a cache: one good entry, one damaged, one stale temporary."""
    from bench.storage.cache import Cache

    folder = tmp_path / "thesis"
    (folder / "sub").mkdir(parents=True)
    (folder / "thesis.tex").write_text("\\documentclass{article}\n")
    (folder / "sub" / "data.csv").write_text("a,b\n1,2\n")
    cache = Cache(folder)
    cache.save("models", "good", {"w": torch.ones(4)})
    cache.save("models", "bad", {"w": torch.ones(4)})
    payload = cache.entry_path("models", "bad") / "object.pt"
    payload.write_bytes(payload.read_bytes()[:50])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    (folder / "models" / f".half.{socket.gethostname()}.{int(dead.stdout)}.0123abcd.tmp").mkdir()
    return folder


def _users_files_intact(folder: Path) -> None:
    assert (folder / "thesis.tex").read_text() == "\\documentclass{article}\n"
    assert (folder / "sub" / "data.csv").read_text() == "a,b\n1,2\n"


def test_cache_verify_lists_foreign_files_as_left_in_place(victim):
    code, out, _ = run_cli(["cache", "verify", "--cache-dir", str(victim)])
    assert code == 1  # one damaged entry
    assert "foreign  thesis.tex (not PrivBench's, left in place)" in out
    assert "foreign  sub/data.csv (not PrivBench's, left in place)" in out
    assert "damaged  models/bad" in out and "stale    models/.half." in out
    assert not any("thesis.tex" in line and "removes it" in line for line in out.splitlines())
    _users_files_intact(victim)
    assert (victim / "models" / "bad").is_dir()  # verify changes nothing


@pytest.mark.parametrize("everything", [False, True], ids=["clean", "clean-all"])
def test_cache_clean_removes_only_the_cache_s_own_files(victim, everything):
    code, out, err = run_cli(["cache", "clean", "--cache-dir", str(victim), *(["--all"] if everything else [])])
    assert code == 0, err
    _users_files_intact(victim)
    assert not (victim / "models" / "bad").exists()  # the damaged entry is the cache's: removed
    assert not [p for p in (victim / "models").iterdir() if p.name.endswith(".tmp")]
    assert (victim / "models" / "good").is_dir() != everything
    assert "2 foreign file(s) not PrivBench's, left in place" in out
    assert f"removed {2 if everything else 1} entr" in out


def test_cache_clean_twice_keeps_the_user_s_files(victim):
    for _ in range(2):
        assert run_cli(["cache", "clean", "--all", "--cache-dir", str(victim)])[0] == 0
    _users_files_intact(victim)


# --- 2. a cache folder that does not exist ---------------------------------------------------


@pytest.mark.parametrize("action", ["verify", "clean"])
def test_a_missing_cache_folder_is_an_error(tmp_path, action):
    code, out, err = run_cli(["cache", action, "--cache-dir", str(tmp_path / "nonexistent")])
    one_line_error(code, out, err, "--cache-dir: no such folder", str(tmp_path / "nonexistent"))
    assert not (tmp_path / "nonexistent").exists()


# --- 3. submit --name ------------------------------------------------------------------------


@pytest.mark.parametrize("name, phrase", [
    ("", "empty entry name"),
    ("   ", "empty entry name"),
    ("../../x", "not a path"),
    ("a/b", "not a path"),
    ("a\\b", "not a path"),
    ("..", "not a path"),
    ("two\nlines", "one line of printable text"),
])
def test_submit_refuses_names_that_are_empty_or_paths(tmp_path, name, phrase):
    argv = ["submit", "--mechanism", "pixelate", "--name", name, "--entries", str(tmp_path / "entries"),
            "--results-dir", str(tmp_path / "results")]
    code, out, err = run_cli(argv)
    one_line_error(code, out, err, "--name", phrase)
    assert list(tmp_path.iterdir()) == []


# --- 4. an option that takes one value, given twice -------------------------------------------

RUN = ["run", "--mechanism", "pixelate", "--task", FS, "--profile", "smoke"]


@pytest.mark.parametrize("argv, option", [
    ([*RUN, "--profile", "paper"], "--profile"),
    ([*RUN, "--seed", "1", "--seed", "2"], "--seed"),
    ([*RUN, "--mechanism", "dp_pix"], "--mechanism"),
    ([*RUN, "--task", "fewshot_synth_scenes"], "--task"),
    ([*RUN, "--device=cpu", "--device", "cuda"], "--device"),
    (["grid", "--task", FS, "--mechanism", "pixelate", "--seeds", "0", "--seeds", "1"], "--seeds"),
    (["tune", "--mechanism", "pixelate", "--task", FS, "--trials", "4", "--trials", "8"], "--trials"),
])
def test_an_option_given_twice_is_refused(tmp_path, argv, option):
    code, out, err = run_cli([*argv, "--results-dir", str(tmp_path / "results")])
    one_line_error(code, out, err, f"argument {option}: given twice", "give it once")
    assert not (tmp_path / "results").exists()


def test_repeatable_options_still_repeat(tmp_path):
    """--param and --set append; the one-value rule is for options that store one value."""
    code, out, err = run_cli([*RUN, "--param", "block=4", "--param", "block=8", "--results-dir", str(tmp_path)])
    one_line_error(code, out, err, "parameter 'block' given twice")  # the parameter, not the option


# --- 5. a --mechanism-file that registers nothing ---------------------------------------------


def test_a_mechanism_file_that_registers_no_mechanism_is_refused(tmp_path):
    plugin = tmp_path / "helpers.py"
    plugin.write_text("from bench.core.interfaces import Mechanism\n\nclass Forgotten(Mechanism):\n    pass\n")
    code, out, err = run_cli(["run", "--mechanism-file", str(plugin), "--mechanism", "forgotten", "--task", FS,
                              "--results-dir", str(tmp_path / "results")])
    one_line_error(code, out, err, str(plugin), "registers no mechanism")
    assert not (tmp_path / "results").exists()
    again = run_cli(["run", "--mechanism-file", str(plugin), "--mechanism", "forgotten", "--task", FS,
                     "--results-dir", str(tmp_path / "results")])  # loaded before: the same answer
    one_line_error(*again, "registers no mechanism")


# --- 6. --executor ray without Ray --------------------------------------------------------------


def test_grid_on_ray_without_ray_is_refused_before_the_store_is_created(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails and find_spec answers None: Ray is absent
    results = tmp_path / "results"
    code, out, err = run_cli(["grid", "--task", FS, "--mechanism", "pixelate", "--profile", "smoke",
                              "--executor", "ray", "--results-dir", str(results)])
    one_line_error(code, out, err, "the ray executor needs Ray")
    assert not results.exists() and not (results / "mlflow.db").exists()
    assert list(tmp_path.iterdir()) == []


# --- 7. tune --param with a value out of range -------------------------------------------------


def test_tune_names_the_parameter_value_and_range_it_refuses(tmp_path):
    code, out, err = run_cli(["tune", "--mechanism", "pixelate", "--task", FS, "--profile", "smoke",
                              "--param", "block=0", "--results-dir", str(tmp_path / "results")])
    one_line_error(code, out, err, "'block'", "got 0", "an integer in [1,")
    assert "no parameter left to tune" not in err
    assert not (tmp_path / "results").exists()


# --- 8. bench ui and its children --------------------------------------------------------------


def _children(root: int) -> list[int]:
    """Every live descendant of a process (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for pid in parents.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
@pytest.mark.slow  # MLflow's server takes 20-40 s to answer on 2 shared cores
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_bench_ui_takes_the_server_and_its_children_down(tmp_path, signum):
    from bench.storage.tracking import Tracker

    results = tmp_path / "results"
    Tracker(results)
    port = _free_port()
    ui = subprocess.Popen([sys.executable, "-m", "bench", "ui", "--port", str(port), "--results-dir", str(results)],
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    children: list[int] = []
    try:
        line = ui.stdout.readline()  # printed once the server answers
        assert f"http://127.0.0.1:{port}/" in line, line
        children = _children(ui.pid)
        assert children and not _port_is_free(port)
        ui.send_signal(signum)
        assert ui.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while any(map(_alive, children)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in children if _alive(pid)], "bench ui left processes behind"
        assert _port_is_free(port)
    finally:
        if ui.poll() is None:
            ui.kill()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


_SERVER_WITH_A_CHILD = """
import signal, subprocess, sys, time
{ignore}
child = subprocess.Popen([sys.executable, "-c", "import signal, time\\n{ignore_child}\\ntime.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
@pytest.mark.parametrize("stubborn", [False, True], ids=["obeys-sigterm", "ignores-sigterm"])
def test_stop_takes_down_the_server_s_process_group(stubborn):
    """The cheap half of the test above: a stand-in server with a child, in its own group, as bench ui starts it."""
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN)" if stubborn else ""
    script = _SERVER_WITH_A_CHILD.format(ignore="", ignore_child=ignore)
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    child = int(server.stdout.readline())
    started = time.monotonic()
    ui_cmd.stop(server, server.pid, grace_s=1.0)
    assert server.returncode is not None
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the server's child outlived bench ui"
    assert time.monotonic() - started < 10


def test_sigterm_while_serving_stops_the_server_and_restores_the_handler(tmp_path, monkeypatch):
    """In-process: SIGTERM reaches bench ui as a stop (exit 0), the server is stopped, the handler put back."""
    from bench.storage.tracking import Tracker

    results = tmp_path / "results"
    Tracker(results)

    class Server:
        pid = None  # a stand-in: no process group to signal
        terminated = False

        def poll(self):
            return None

        def wait(self, timeout=None):
            if self.terminated:
                return 0
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this
            raise AssertionError("SIGTERM did not stop bench ui")

        def terminate(self):
            self.terminated = True

        kill = terminate

    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append((Server(), k)) or started[-1][0])
    monkeypatch.setattr(ui_cmd, "wait_until_serving", lambda *a, **k: None)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["ui", "--port", str(_free_port()), "--results-dir", str(results)]) == 0
    server, options = started[0]
    assert server.terminated and options.get("start_new_session") is True
    assert signal.getsignal(signal.SIGTERM) is before
