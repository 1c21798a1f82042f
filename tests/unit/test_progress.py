"""What a running cell shows: its stage, and its loops with an ETA, on a terminal and off one."""

from __future__ import annotations

import io
import multiprocessing
import time

import pytest

from bench.system.progress import Display, Emitter, StageClock, duration, queue_sender


def _cell(emitter: Emitter) -> None:
    emitter.start("fewshot_synth_faces · dp_pix(ε=3, b=4) · s0")
    emitter.log("releasing synth_faces through dp_pix")
    for _ in emitter.progress(range(3), desc="few-shot epochs"):
        pass
    emitter.log("attacking with face_reid")


def test_off_a_terminal_a_line_per_stage_and_loop_lines():
    stream = io.StringIO()
    display = Display(interactive=False, stream=stream)
    display.line_every = 0.0
    _cell(display.emitter())
    display.close()
    lines = stream.getvalue().splitlines()
    label = "[bench] fewshot_synth_faces · dp_pix(ε=3, b=4) · s0: "
    assert lines[0] == label + "starting" and lines[1] == label + "releasing synth_faces through dp_pix"
    assert lines[2].startswith(label + "releasing synth_faces through dp_pix: few-shot epochs 1/3 [")
    assert "3/3" in lines[4] and lines[-1] == label + "attacking with face_reid"


def test_quiet_off_a_terminal_prints_nothing():
    stream = io.StringIO()
    with Display(interactive=False, lines=False, stream=stream) as display:
        _cell(display.emitter())
    assert stream.getvalue() == ""


def test_on_a_terminal_the_bar_names_cell_stage_loop_and_eta():
    stream = io.StringIO()
    display = Display(interactive=True, stream=stream)
    emitter = display.emitter(1)
    emitter.start("reid_synth_persons · image_dp(ε=1e+06) · s0")
    emitter.log("training the centroid reID model")
    steps = emitter.progress(range(4), desc="reID epochs")
    next(steps)
    next(steps)
    text = stream.getvalue()
    assert "reid_synth_persons · image_dp(ε=1e+06) · s0 · training the centroid reID model · reID epochs 1/4 [" in text
    assert "<" in text.rsplit("reID epochs", 1)[1]  # an ETA once a step is done
    display.close()


def test_events_from_a_worker_process_reach_the_display():
    events = multiprocessing.get_context("spawn").Queue()
    _cell(Emitter(queue_sender(events), 2))
    stream = io.StringIO()
    display = Display(interactive=False, stream=stream)
    deadline = time.monotonic() + 10
    while "attacking" not in stream.getvalue() and time.monotonic() < deadline:
        display.drain(events)
    assert "attacking with face_reid" in stream.getvalue()


def test_duration():
    assert duration(5) == "0m05s" and duration(3725) == "1h02m05s" and duration(-1) == "0m00s"


def test_stage_clock_times_each_stage_and_adds_a_repeated_one():
    ticks = iter([10.0, 12.5, 20.0, 21.0, 30.0, 30.5])
    clock = StageClock(now=lambda: next(ticks))
    with clock("data"):
        pass
    with clock("task"):
        pass
    with pytest.raises(RuntimeError), clock("task"):  # a failing stage still counts its time
        raise RuntimeError
    assert clock.seconds == {"data": 2.5, "task": 1.5}
