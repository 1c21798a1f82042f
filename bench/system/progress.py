"""What a running cell is doing, shown while it runs: its stage, and a bar with an ETA for its loops.

A cell reports through two functions of its :class:`~bench.core.interfaces.RunContext`: ``log``
(a line naming the stage it enters: loading the data, releasing, training a model,
attacking) and ``progress`` (wraps a loop: epochs, episodes). :class:`Emitter` turns
both into events for one worker slot; :class:`Display` shows the events of every slot:
on a terminal one bar per slot under the grid's bar (``label · stage · loop n/N
[elapsed<ETA]``), redrawn every second; off a terminal plain lines, one per stage and one
per loop at most every :attr:`Display.line_every` seconds. A bar line is fitted to the
terminal's width by shortening its label, so the stage's counter, ETA and bar stay
visible at 80 columns; while bars are drawn, whatever else is written to stderr (warnings)
goes through :meth:`Display.write`, above the bars, instead of over them.

Worker processes send their events through a queue (:func:`queue_sender`); the process
that owns the terminal drains it (:meth:`Display.drain`).
"""

from __future__ import annotations

import contextlib
import io
import os
import queue as _queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TextIO

__all__ = ["Display", "Emitter", "StageClock", "fit_line", "queue_sender"]

Send = Callable[[tuple], None]
MIN_LABEL = 12
"""The fewest characters of a cell's label a bar line keeps before it shortens the stage too."""


class Emitter:
    """The ``log`` and ``progress`` functions of one cell on one worker slot.

    Args:
        send: Delivers an event tuple ``(slot, kind, *payload)``.
        slot: The worker slot (0 for a single process).
    """

    def __init__(self, send: Send, slot: int = 0):
        self._send = send
        self.slot = slot

    def start(self, label: str) -> None:
        """Announces a cell."""
        self._send((self.slot, "start", label))

    def end(self) -> None:
        """Announces that the slot's cell is over."""
        self._send((self.slot, "end"))

    def log(self, message: str) -> None:
        """Names the stage the cell enters."""
        self._send((self.slot, "stage", str(message)))

    def progress(self, iterable: Iterable, total: int | None = None, desc: str | None = None) -> Iterator:
        """Yields from ``iterable``, reporting each item as a step of a loop named ``desc``."""
        if total is None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self._send((self.slot, "loop", desc or "", total))
        try:
            for item in iterable:
                yield item
                self._send((self.slot, "step"))
        finally:
            self._send((self.slot, "loop_end"))


def queue_sender(events: Any) -> Send:
    """Returns a ``send`` that puts events on a multiprocessing queue (never blocking the cell)."""
    def send(event: tuple) -> None:
        try:
            events.put_nowait(event)
        except (_queue.Full, OSError, ValueError):
            pass

    return send


@dataclass
class _Slot:
    label: str = ""
    stage: str = ""
    loop: str = ""
    total: int | None = None
    n: int = 0
    loop_started: float = 0.0
    cell_started: float = 0.0
    last_line: float = 0.0
    position: int = 0
    bar: Any = None


class Display:
    """Shows every slot's cell, stage and loop.

    Args:
        interactive: Bars on a terminal (True) or plain lines (False).
        lines: Print plain lines at all when not interactive (False: silent).
        stream: Where to write (stderr).
        copy: Where stage lines also go while bars are drawn (``bench run > log.txt``
            on a terminal: the log gets the lines, the terminal the bar), or None.
        width: Columns a bar line may take (default: the terminal's; none off one).
        line_every: Seconds between two loop lines of one slot, off a terminal.
    """

    line_every = 30.0

    def __init__(self, interactive: bool, lines: bool = True, stream: TextIO | None = None,
                 copy: TextIO | None = None, width: int | None = None):
        self.interactive = interactive
        self.lines = lines
        self.stream = stream or sys.stderr
        self.copy = copy if interactive else None
        self.width = width
        self.slots: dict[int, _Slot] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._redirected: _AboveBars | None = None
        if interactive:
            if stream is None and sys.stderr is self.stream:  # warnings and prints to stderr: above the bars
                self._redirected = sys.stderr = _AboveBars(self)
            self._ticker = threading.Thread(target=self._tick, name="bench-progress", daemon=True)
            self._ticker.start()

    def write(self, text: str) -> None:
        """Writes a line (a warning, say) above the bars, which are redrawn under it."""
        if not self.interactive:
            print(text, file=self.stream, flush=True)
            return
        from tqdm import tqdm

        with self._lock:
            tqdm.write(text, file=self.stream)

    def emitter(self, slot: int = 0) -> Emitter:
        """Returns an emitter whose events this display shows directly (same process)."""
        return Emitter(self.handle, slot)

    def handle(self, event: tuple) -> None:
        """Shows one event ``(slot, kind, *payload)``."""
        slot_id, kind, *payload = event
        with self._lock:
            slot = self.slots.setdefault(slot_id, _Slot(position=int(slot_id)))
            now = time.monotonic()
            if kind == "start":
                slot.label, slot.stage, slot.loop, slot.total, slot.cell_started = payload[0], "starting", "", None, now
                self._line(slot, "starting")
            elif kind == "stage":
                slot.stage, slot.loop, slot.total = payload[0], "", None
                self._line(slot, payload[0])
            elif kind == "loop":
                slot.loop, slot.total, slot.n, slot.loop_started = payload[0], payload[1], 0, now
            elif kind == "step":
                slot.n += 1
                if not self.interactive and (now - slot.last_line >= self.line_every or slot.n == slot.total):
                    self._line(slot, f"{slot.stage}: {self._loop_text(slot, now)}")
            elif kind == "loop_end":
                slot.loop, slot.total = "", None
            elif kind == "end":
                self._close_bar(slot)
                self.slots.pop(slot_id, None)
                return
            self._draw(slot, now)

    def drain(self, events: Any) -> None:
        """Shows every event waiting on a queue."""
        while True:
            try:
                event = events.get_nowait()
            except (_queue.Empty, OSError, ValueError, EOFError):
                return
            self.handle(event)

    def close(self) -> None:
        """Stops redrawing, removes the bars and gives stderr back."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        with self._lock:
            for slot in self.slots.values():
                self._close_bar(slot)
            self.slots.clear()
            if self._redirected is not None:
                self._redirected.flush_line()
                if sys.stderr is self._redirected:
                    sys.stderr = self.stream
                self._redirected = None

    def __enter__(self) -> "Display":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- drawing ---------------------------------------------------------------------------

    def _line(self, slot: _Slot, text: str) -> None:
        if self.interactive:
            if self.copy is not None:
                print(f"[bench] {slot.label}: {text}", file=self.copy, flush=True)
            return
        if not self.lines:
            return
        slot.last_line = time.monotonic()
        print(f"[bench] {slot.label}: {text}", file=self.stream, flush=True)

    def _loop_text(self, slot: _Slot, now: float) -> str:
        elapsed = now - slot.loop_started
        text = f"{slot.loop or 'steps'} {slot.n}/{slot.total if slot.total is not None else '?'} [{duration(elapsed)}"
        if slot.total and slot.n:
            text += f"<{duration(elapsed / slot.n * (slot.total - slot.n))}"
        return text + "]"

    def _status(self, slot: _Slot, now: float) -> str:
        label, stage, counter = self._parts(slot, now)
        return label + stage + counter

    def _parts(self, slot: _Slot, now: float) -> tuple[str, str, str]:
        """Returns a bar line's cell label, `` · stage`` and what must stay visible (loop, counter, ETA, bar)."""
        label, stage = slot.label, f" · {slot.stage}"
        if slot.loop or slot.total:
            counter = f" · {self._loop_text(slot, now)}"
        else:
            counter = f" [{duration(now - slot.cell_started)} in cell]"
        if slot.total:
            filled = int(20 * min(slot.n, slot.total) / slot.total)
            counter += f" |{'█' * filled}{' ' * (20 - filled)}|"
        return label, stage, counter

    def _columns(self) -> int | None:
        """Returns the columns a bar line may take: ``width``, else the terminal's, else None (no limit)."""
        if self.width is not None:
            return self.width
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            return None

    def _draw(self, slot: _Slot, now: float) -> None:
        if not self.interactive:
            return
        if slot.bar is None:
            from tqdm import tqdm

            slot.bar = tqdm(total=0, position=1 + slot.position, leave=False, file=self.stream, bar_format="{desc}",
                            dynamic_ncols=True)
        label, stage, counter = self._parts(slot, now)
        slot.bar.set_description_str(fit_line(label, counter, self._columns(), stage), refresh=False)
        slot.bar.refresh()

    def _close_bar(self, slot: _Slot) -> None:
        if slot.bar is not None:
            slot.bar.close()
            slot.bar = None

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                now = time.monotonic()
                for slot in list(self.slots.values()):
                    try:
                        self._draw(slot, now)
                    except Exception:  # a closed terminal must not stop the cell
                        pass


class _AboveBars:
    """Stands in for ``sys.stderr`` while bars are drawn: each complete line goes through :meth:`Display.write`."""

    def __init__(self, display: Display):
        self._display = display
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            self._display.write(line)
        return len(text)

    def flush(self) -> None:
        self._display.stream.flush()

    def flush_line(self) -> None:
        """Writes what is left of an unfinished line."""
        if self._pending:
            self._display.write(self._pending)
            self._pending = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._display.stream, name)


def fit_line(label: str, counter: str, columns: int | None, stage: str = "") -> str:
    """Returns ``label + stage + counter`` within ``columns - 1`` characters, never shortening the counter.

    The label (the cell) is shortened first (``…``), then the stage, so the counter, ETA
    and bar stay visible on a narrow terminal.

    Args:
        label: The cell's label: cut first.
        counter: What must stay: the loop, counter, ETA and bar.
        columns: The terminal's width, or None for no limit.
        stage: `` · stage``: cut only when the label alone cannot make room.
    """
    room = None if columns is None else columns - 1 - len(counter)
    if room is None or len(label) + len(stage) <= room:
        return label + stage + counter
    if room - len(stage) >= MIN_LABEL:
        return label[:room - len(stage) - 1] + "…" + stage + counter
    if room >= 2:
        return (label + stage)[:room - 1] + "…" + counter
    return counter.strip()[:max(1, columns - 1)]


def duration(seconds: float) -> str:
    """Formats seconds as ``1h02m03s`` or ``2m03s``."""
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class StageClock:
    """Wall-clock seconds of a cell's stages (``Result.stage_seconds``).

    Example::

        clock = StageClock()
        with clock("release"):
            ...
        clock.seconds  # {"release": 1.25}

    Args:
        now: The clock read in seconds.
    """

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self.now = now
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        """Times the block as ``stage`` (added to an earlier stage of that name), also when it raises."""
        started = self.now()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + self.now() - started


def interactive() -> bool:
    """Whether to draw progress: stderr is a terminal and not in CI."""
    return sys.stderr.isatty() and not os.environ.get("CI")
