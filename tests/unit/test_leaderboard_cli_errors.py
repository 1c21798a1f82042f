"""``bench leaderboard build | serve``: --out, --entries and --port are checked before a site is built or served."""

from __future__ import annotations

import socket

import pytest

from bench.cli import main
from bench.errors import BenchError


def leaderboard(tmp_path, *argv: str) -> list[str]:
    return ["leaderboard", *argv, "--results-dir", str(tmp_path / "results"), "--suite", "standard"]


def run(capsys, argv: list[str]) -> str:
    """Runs the CLI, asserts one error line and exit 2, and returns the line."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("where, fragment", [("file", "is a file, not a folder"),
                                             ("file/sub", "is a file, so no folder can be created in it")])
def test_build_refuses_an_out_that_cannot_be_a_folder(capsys, tmp_path, where, fragment):
    (tmp_path / "file").write_text("mine\n")
    err = run(capsys, leaderboard(tmp_path, "build", "--no-entries", "--out", str(tmp_path / where)))
    assert err.startswith(f"bench: error: --out {tmp_path / where}") and fragment in err
    assert (tmp_path / "file").read_text() == "mine\n"


@pytest.mark.parametrize("action", ["build", "show"])
@pytest.mark.parametrize("where, fragment", [("missing", "does not exist"), ("file", "is a file, not a folder")])
def test_an_entries_folder_that_is_none_is_refused(capsys, tmp_path, action, where, fragment):
    (tmp_path / "file").write_text("mine\n")
    err = run(capsys, leaderboard(tmp_path, action, "--entries", str(tmp_path / where)))
    assert err.startswith(f"bench: error: --entries {tmp_path / where} {fragment}")


def test_bench_entries_names_itself(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_ENTRIES", str(tmp_path / "missing"))
    assert "$BENCH_ENTRIES" in run(capsys, leaderboard(tmp_path, "show"))


@pytest.mark.parametrize("port", ["70000", "-1", "65536"])
def test_serve_refuses_a_port_out_of_range_before_building(capsys, tmp_path, port):
    err = run(capsys, leaderboard(tmp_path, "serve", "--no-entries", "--out", str(tmp_path / "site"), "--port", port))
    assert err == f"bench: error: --port must be in 0..65535 (0 picks a free port), got {port}"
    assert not (tmp_path / "site").exists()


def test_serve_refuses_a_port_in_use_before_building(capsys, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = run(capsys, leaderboard(tmp_path, "serve", "--no-entries", "--out", str(tmp_path / "site"),
                                      "--port", str(port)))
    assert f"cannot listen on 127.0.0.1:{port}" in err and "pass another --port" in err
    assert not (tmp_path / "site").exists()


def test_build_site_into_a_file_is_one_line(tmp_path):
    from leaderboard.render import build_site

    (tmp_path / "file").write_text("mine\n")
    with pytest.raises(BenchError, match="cannot create the site folder") as exc:
        build_site(None, tmp_path / "file")
    assert "\n" not in str(exc.value) and (tmp_path / "file").read_text() == "mine\n"
