"""Training curves: per-epoch means, one record per model of a cell, nothing outside a recording."""

from __future__ import annotations

import math

import torch

from bench.core import curves
from bench.storage.modelcache import cached_model


def test_epoch_values_average_each_epoch_and_mark_an_empty_one():
    values = curves.EpochValues()
    for v in (1.0, 3.0):
        values.add(torch.tensor(v, requires_grad=True) * 1)
    values.close_epoch()
    values.close_epoch()
    values.add(5.0)
    values.close_epoch()
    assert values.means[0] == 2.0 and math.isnan(values.means[1]) and values.means[2] == 5.0


def test_a_model_used_twice_is_recorded_once_and_namesakes_are_numbered():
    with curves.recording() as recorded:
        curves.record("face_reid.clean", "k1", {"loss": [3, 2]})
        curves.record("face_reid.clean", "k1", {"loss": [3, 2]})
        curves.record("face_reid.clean", "k2", {"loss": [5, 4, 1]})
        curves.record("fewshot.clean", "k3", None)
    assert recorded == {"face_reid.clean.loss": [3.0, 2.0], "face_reid.clean_2.loss": [5.0, 4.0, 1.0]}
    curves.record("outside", "k4", {"loss": [1]})  # no cell is recording: nothing to keep, no error


def test_cached_model_records_its_curve_fresh_and_from_the_cache(tmp_path):
    def train(model):
        return {"steps": 2, "curve": {"loss": [0.9, 0.4]}}

    for _ in range(2):  # trained, then read back from the cache
        with curves.recording() as recorded:
            _, info = cached_model(tmp_path, ("m", 1), lambda: torch.nn.Linear(2, 2), train, name="toy")
        assert recorded == {"toy.loss": [0.9, 0.4]} and info == {"steps": 2}


def test_a_cpu_model_is_cached_per_thread_count(tmp_path, monkeypatch):
    """Threads split float sums: a model trained on 1 thread is not served to a process on 2."""
    trained = []

    def train(model):
        trained.append(torch.get_num_threads())
        return {}

    for threads in (1, 2, 1, 2):
        monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
        cached_model(tmp_path, ("m", 1), lambda: torch.nn.Linear(2, 2), train)
    assert trained == [1, 2]  # each thread count trains once, then reads its own model back
