"""The CPU mechanisms' thread pool (mechanisms/_threads.py)."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from mechanisms import _threads
from mechanisms._threads import run_beside, run_tasks


def _names(count: int, threads: int) -> list[str]:
    names = [""] * count

    def task(i: int) -> None:
        time.sleep(0.01)
        names[i] = threading.current_thread().name

    run_tasks([lambda i=i: task(i) for i in range(count)], threads)
    return names


def test_tasks_run_on_a_pool_kept_between_calls():
    first, second = _names(4, 2), _names(4, 2)
    assert all(name.startswith("bench-mechanism") for name in first + second)
    assert len(set(first)) == 2  # two tasks at a time, on two threads
    assert set(second) == set(first)


def test_the_pool_has_the_threads_asked_for():
    assert len(set(_names(6, 3))) == 3
    assert len(set(_names(6, 2))) == 2


def test_one_thread_or_one_task_runs_in_the_calling_thread():
    here = threading.current_thread().name
    assert _names(3, 1) == [here] * 3
    assert _names(1, 4) == [here]


def test_a_task_that_runs_tasks_runs_them_in_its_own_thread():
    inner: list[str] = []

    def outer() -> None:
        run_tasks([lambda: inner.append(threading.current_thread().name)] * 2, 2)
        inner.append(threading.current_thread().name)

    run_tasks([outer, outer], 2)  # would wait for itself on a full pool otherwise
    assert len(inner) == 6 and all(name.startswith("bench-mechanism") for name in inner)


def test_an_error_is_raised_once_every_task_has_finished():
    done = []

    def slow() -> None:
        time.sleep(0.05)
        done.append(1)

    def fails() -> None:
        raise ValueError("bad piece")

    with pytest.raises(ValueError, match="bad piece"):
        run_tasks([fails, slow, slow], 2)
    assert len(done) == 2


def test_run_beside_runs_the_main_work_here_while_the_pool_runs_the_helpers(monkeypatch):
    monkeypatch.setattr(_threads.torch, "get_num_threads", lambda: 2)
    started, names = threading.Event(), {}

    def main() -> None:
        assert started.wait(10)  # the helper runs while this thread waits: beside it, not after
        names["main"] = threading.current_thread().name

    def helper() -> None:
        started.set()
        names["helper"] = threading.current_thread().name

    run_beside(main, [helper])
    assert names["main"] == threading.current_thread().name
    assert names["helper"].startswith("bench-mechanism")


def test_run_beside_raises_the_main_error_once_the_helpers_have_finished(monkeypatch):
    monkeypatch.setattr(_threads.torch, "get_num_threads", lambda: 2)
    done = []

    def slow_and_broken() -> None:
        time.sleep(0.05)
        done.append(1)
        raise KeyError("helper")

    def main() -> None:
        raise ValueError("main")

    with pytest.raises(ValueError, match="main"):
        run_beside(main, [slow_and_broken])
    assert done == [1]
    with pytest.raises(KeyError, match="helper"):
        run_beside(lambda: None, [slow_and_broken])


def test_run_beside_in_a_task_runs_the_helpers_after_the_main_work():
    order: dict[str, list[str]] = {}

    def note(what: str) -> None:
        order.setdefault(threading.current_thread().name, []).append(what)

    def task() -> None:
        run_beside(lambda: note("main"), [lambda: note("helper")])

    run_tasks([task, task], 2)  # would wait for itself on a full pool otherwise
    assert sum(len(v) for v in order.values()) == 4
    assert all(name.startswith("bench-mechanism") and seen == ["main", "helper"] * (len(seen) // 2)
               for name, seen in order.items())


def _child_runs_tasks(queue) -> None:
    queue.put(len(set(_names(4, 2))))


def test_a_forked_child_starts_its_own_pool():
    _names(2, 2)
    assert _threads._pool is not None
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_runs_tasks, args=(queue,), daemon=True)
    child.start()
    assert queue.get(timeout=30) == 2
    child.join(60)
    assert child.exitcode == 0


def _drop_pool() -> None:
    if _threads._pool is not None:
        _threads._pool.shutdown()
    _threads._forget_pool()


def test_callers_on_several_threads_with_other_thread_counts_all_finish(monkeypatch):
    class SlowSubmit(_threads.ThreadPoolExecutor):
        """Leaves time between a call's submissions for another caller to replace the pool."""

        def submit(self, fn, /, *args, **kwargs):
            time.sleep(0.002)
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(_threads, "ThreadPoolExecutor", SlowSubmit)
    _drop_pool()
    done: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def caller(threads: int) -> None:
        def task() -> None:
            with lock:
                done.append(threads)

        try:
            for _ in range(10):
                run_tasks([task] * 4, threads)
        except BaseException as exc:  # e.g. "cannot schedule new futures after shutdown"
            errors.append(exc)

    callers = [threading.Thread(target=caller, args=(t,)) for t in (2, 3, 2, 4)]
    for c in callers:
        c.start()
    for c in callers:
        c.join(60)
    _drop_pool()
    assert errors == []
    assert sorted(done) == sorted([2] * 80 + [3] * 40 + [4] * 40)
