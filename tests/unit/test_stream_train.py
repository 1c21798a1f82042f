"""Streamed SGD training: images on disk train like images in memory, and DDP (gloo, 2 CPU processes) like one process."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from bench.core.interfaces import RunContext
from bench.data.shards import ShardedImages, write_tensor
from bench.nn.ddp import run_data_parallel, world_size
from bench.nn.stream_train import SgdSchedule, train_streamed
from bench.system import precision

SCHEDULE = SgdSchedule(epochs=3, batch_size=16, lr=0.05, lr_step=2, augment="none")


def _data(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (n,), generator=g)
    images = (torch.rand(n, 3, 8, 8, generator=g) * 80 + labels[:, None, None, None] * 40).to(torch.uint8)
    return images, labels


def _linear() -> nn.Module:
    torch.manual_seed(7)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4))


def _ctx(device: torch.device) -> RunContext:
    return RunContext(device=device, seed=0, profile="smoke", data_root=None, cache_dir=None)  # type: ignore[arg-type]


def _train_rank(device: torch.device, images, labels, schedule: SgdSchedule) -> tuple[dict, dict]:
    model = _linear().to(device)
    info = train_streamed(model, images, labels, schedule, 8, _ctx(device), seed=5)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, info


def _rank_settings(device: torch.device, images, labels, schedule: SgdSchedule) -> tuple[dict, dict]:
    state, info = _train_rank(device, images, labels, schedule)
    return state, {**info, "precision": precision.current(),
                   "tf32": (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32),
                   "deterministic": torch.are_deterministic_algorithms_enabled(),
                   "fills_new_memory": torch.utils.deterministic.fill_uninitialized_memory}


def test_training_learns_and_records_its_curve():
    images, labels = _data()
    model = _linear()
    info = train_streamed(model, images, labels, replace(SCHEDULE, epochs=6), 8, _ctx(torch.device("cpu")), seed=5)
    assert info["steps"] == 6 * 4 and len(info["curve"]["loss"]) == 6
    assert info["curve"]["loss"][-1] < info["curve"]["loss"][0]
    assert not model.training


def test_images_on_disk_train_exactly_like_images_in_memory(tmp_path):
    images, labels = _data()
    write_tensor(tmp_path / "split", images)
    on_disk = ShardedImages(tmp_path / "split", images.shape[1:])
    a, _ = _train_rank(torch.device("cpu"), images, labels, SCHEDULE)
    b, _ = _train_rank(torch.device("cpu"), on_disk, labels, SCHEDULE)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_ddp_on_two_gloo_processes_matches_one_process():
    images, labels = _data()
    single, _ = _train_rank(torch.device("cpu"), images, labels, SCHEDULE)
    state, info = run_data_parallel(2, torch.device("cpu"), _train_rank, images, labels, SCHEDULE, backend="gloo")
    assert info["processes"] == 2 and len(info["curve"]["loss"]) == SCHEDULE.epochs
    for k in single:
        torch.testing.assert_close(state[k], single[k], rtol=1e-4, atol=1e-5)


def test_ddp_ranks_compute_at_the_precision_in_force_with_tf32_off_and_deterministic_algorithms():
    images, labels = _data()
    full, _ = _train_rank(torch.device("cpu"), images, labels, SCHEDULE)
    with precision.using("bf16"):
        single, _ = _train_rank(torch.device("cpu"), images, labels, SCHEDULE)
        state, info = run_data_parallel(2, torch.device("cpu"), _rank_settings, images, labels, SCHEDULE,
                                        backend="gloo")
    # A spawned rank starts with torch's defaults (cuDNN's TF32 on) and no precision set.
    assert info["precision"] == "bf16" and info["tf32"] == (False, False) and info["deterministic"]
    assert not info["fills_new_memory"]
    assert any(not torch.allclose(single[k], full[k], rtol=1e-3, atol=1e-4) for k in single)  # bf16 changed them
    for k in single:
        torch.testing.assert_close(state[k], single[k], rtol=1e-2, atol=1e-3)


def test_world_size_defaults_to_the_visible_gpus():
    assert world_size(None, torch.device("cpu")) == 1
    assert world_size(3, torch.device("cpu")) == 3
