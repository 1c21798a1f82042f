"""The progress line at 80 columns, warnings above the bars, and stage lines into a redirected stdout."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from bench.system.progress import Display, fit_line

LONG_LABEL = ("fewshot_synth_faces · dp_pix(epsilon=3, block=4, m=1) · s0 [task.epochs=3, task.data.n_ids=40, "
              "face_reid.epochs=2]")


def test_fit_line_shortens_the_label_never_the_counter():
    counter = " · epochs 3/10 [0m05s<0m12s] |██████              |"
    line = fit_line(LONG_LABEL, counter, 80, " · training")
    assert len(line) == 79 and line.endswith("… · training" + counter)
    assert fit_line(LONG_LABEL, counter, 60, " · training the few-shot model").endswith("…" + counter)
    assert fit_line("short", counter, 80) == "short" + counter
    assert fit_line(LONG_LABEL, counter, None) == LONG_LABEL + counter


def test_at_80_columns_the_bar_keeps_counter_eta_and_bar():
    stream = io.StringIO()
    display = Display(interactive=True, stream=stream, width=80)
    emitter = display.emitter()
    emitter.start(LONG_LABEL)
    emitter.log("training")
    steps = emitter.progress(range(10), desc="epochs")
    for _ in range(4):
        next(steps)
    drawn = [part for part in re.split(r"[\r\n]|\x1b\[A", stream.getvalue()) if "epochs 3/10" in part]
    steps.close()
    display.close()
    assert drawn, stream.getvalue()
    line = drawn[-1].rstrip()
    assert len(line) <= 79, line
    assert re.search(r"epochs 3/10 \[\d+m\d\ds<\d+m\d\ds\] \|█+ +\|$", line), line
    assert line.startswith("fewshot_synth") and "… · training · epochs" in line


WARN = r"""
import sys, warnings
from bench.system.progress import Display
before = sys.stderr
display = Display(interactive=True, width=80)
emitter = display.emitter()
emitter.start("cell")
emitter.log("training")
print("bench: warning: a cell is computed again", file=sys.stderr)
warnings.warn("a library warning", UserWarning)
display.close()
print(sys.stderr is before)
"""


def test_warnings_and_stderr_lines_go_above_the_bars_and_stderr_comes_back():
    done = subprocess.run([sys.executable, "-c", WARN], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "True"
    lines = [line.strip() for line in re.split(r"[\r\n]", re.sub(r"\x1b\[A", "", done.stderr))]
    assert "bench: warning: a cell is computed again" in lines, done.stderr
    assert any(line.endswith("UserWarning: a library warning") for line in lines), done.stderr
    # each sits on a line of its own, after the bar was cleared: never glued to a bar's text
    assert not any("cell ·" in line and "warning" in line for line in lines), done.stderr


def test_with_stdout_redirected_from_a_terminal_the_stage_lines_go_to_it():
    bars, log = io.StringIO(), io.StringIO()
    with Display(interactive=True, stream=bars, copy=log, width=80) as display:
        emitter = display.emitter()
        emitter.start("cell")
        emitter.log("releasing")
        emitter.log("attacking with face_reid")
    assert log.getvalue().splitlines() == ["[bench] cell: starting", "[bench] cell: releasing",
                                           "[bench] cell: attacking with face_reid"]
