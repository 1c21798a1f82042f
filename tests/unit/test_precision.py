"""Mixed precision: checked before work, in every key it changes, never in a release."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench.cell.plan import RunConfig, plan
from bench.cli import main
from bench.core.interfaces import RunContext
from bench.core.keys import content_key
from bench.core.registry import mechanisms
from bench.data.base import ImageSet
from bench.errors import BenchError
from bench.nn.conv4 import Conv4
from bench.nn.images import embed
from bench.release.dataset import apply_to_split
from bench.storage.modelcache import cached_model
from bench.system import precision
from leaderboard.protocol import BoardKey


def _config(tmp_path, **changes) -> RunConfig:
    base = RunConfig(task="fewshot_synth_faces", mechanism="pixelate", params={"block": 4}, profile="smoke",
                     device="cpu", results_dir=tmp_path / "results")
    return dataclasses.replace(base, **changes)


def test_fp32_keeps_the_cell_key_and_bf16_makes_another_cell(tmp_path):
    default = plan(_config(tmp_path))
    assert plan(_config(tmp_path, precision="fp32")).key == default.key
    mixed = plan(_config(tmp_path, precision="bf16"))
    assert mixed.key != default.key
    assert mixed.protocol == default.protocol  # the board is told apart by the precision itself (BoardKey)


@pytest.mark.parametrize("changes, fragment", [
    ({"precision": "fp16"}, "unknown precision 'fp16' (use fp32 or bf16)"),
    ({"precision": "bf16", "task": "dp_vit_synth_objects"},
     "--precision bf16: task 'dp_vit_synth_objects' computes in fp32 only (use --precision fp32)"),
])
def test_a_precision_the_task_cannot_compute_at_is_refused_in_planning(tmp_path, changes, fragment):
    with pytest.raises(BenchError) as err:
        plan(_config(tmp_path, **changes))
    assert fragment in str(err.value)


def test_the_cli_refuses_bf16_for_an_fp32_only_task_with_one_line_and_writes_nothing(tmp_path, capsys):
    results = tmp_path / "results"
    code = main(["run", "--task", "dp_vit_synth_objects", "--mechanism", "blur", "--profile", "smoke",
                 "--precision", "bf16", "--results-dir", str(results)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().count("\n") == 0 and "fp32 only" in err
    assert not results.exists()


def test_autocast_is_in_force_only_inside_a_bf16_block():
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    with precision.autocast("cpu"):
        assert layer(x).dtype == torch.float32
    with precision.using("bf16"):
        assert precision.current() == "bf16"
        with precision.autocast("cpu"):
            assert layer(x).dtype == torch.bfloat16
        with precision.exact(), precision.autocast("cpu"):
            assert layer(x).dtype == torch.float32
        out = embed(layer, x)  # the shared helpers return float32 whatever ran inside
        full = layer(x).detach()
        assert out.dtype == torch.float32 and not torch.equal(out, full)
        assert torch.allclose(out, full, atol=0.05)
    assert precision.current() == "fp32"


def test_a_model_trained_at_bf16_is_cached_apart_from_its_fp32_twin(tmp_path):
    trained = []

    def build():
        torch.manual_seed(0)
        return torch.nn.Linear(2, 2)

    def train(model):
        trained.append(precision.current())
        return {}

    for mode in ("fp32", "bf16", "fp32", "bf16"):
        with precision.using(mode):
            cached_model(tmp_path, ("twin",), build, train)
    assert trained == ["fp32", "bf16"]


def test_a_release_is_computed_in_full_precision_inside_a_bf16_cell(tmp_path):
    seen = []
    mechanism = mechanisms.get("pixelate")(block=2)
    original = type(mechanism).apply

    def spy(self, images, **kwargs):
        seen.append(precision.current())
        return original(self, images, **kwargs)

    split = ImageSet(torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8), torch.zeros(4, dtype=torch.int64))
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)
    with precision.using("bf16"):
        mechanism.apply = spy.__get__(mechanism)
        inside, _ = apply_to_split(mechanism, split, ctx, "spy")
    outside, _ = apply_to_split(mechanisms.get("pixelate")(block=2), split, ctx, "spy")
    assert seen and set(seen) == {"fp32"}
    assert torch.equal(inside, outside)


def _conv4_batch():
    torch.manual_seed(0)
    return Conv4().to(memory_format=torch.channels_last), torch.randn(20, 3, 32, 32).contiguous(
        memory_format=torch.channels_last)


def test_verify_passes_sound_kernels_and_leaves_the_model_as_it_was():
    model, x = _conv4_batch()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    precision.verify(model, x, "the test model")  # fp32: nothing to check
    with precision.using("bf16"):
        precision.verify(model, x, "the test model")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # batch-norm statistics too
    assert model.training


def test_verify_refuses_a_kernel_that_computes_bf16_wrongly(monkeypatch):
    import torch.nn.functional as F

    model, x = _conv4_batch()
    exact_conv = F.conv2d

    def broken(a, w, *rest):  # what torch 2.14.1 does to some stride-2 convolutions on AMX CPUs, mildly
        out = exact_conv(a, w, *rest)
        return out * 1.1 if a.dtype == torch.bfloat16 else out

    monkeypatch.setattr(F, "conv2d", broken)
    with precision.using("bf16"), pytest.raises(BenchError) as err:
        precision.verify(model, x, "the test model")
    message = str(err.value)
    assert message.startswith("--precision bf16: this machine's bfloat16 kernels compute the test model's Conv2d(3, 64")
    assert "on 32x32 inputs wrongly (relative error 0.1" in message and message.endswith("use --precision fp32")
    # A model that did not train here (read from a cache) is checked when it first embeds.
    with precision.using("bf16"), pytest.raises(BenchError, match="compute the Conv4's Conv2d"):
        embed(model.eval(), x)
    assert torch.equal(embed(model, x), embed(model, x))  # fp32: nothing checked, nothing broken


@pytest.mark.parametrize("versions, expected", [
    ({"precision": "bf16", "torch": "2"}, "bf16"), ({"torch": "2"}, "fp32"), (None, "fp32"),
])
def test_the_recorded_precision_of_old_and_new_results(versions, expected):
    assert precision.recorded(versions) == expected


def test_a_bf16_tuning_study_is_not_the_fp32_one(tmp_path):
    from bench.scale.tune import TuneConfig

    base = _config(tmp_path, split="val")
    assert TuneConfig(base).name == TuneConfig(dataclasses.replace(base, precision="fp32")).name
    assert TuneConfig(dataclasses.replace(base, precision="bf16")).name != TuneConfig(base).name


def test_bf16_boards_are_their_own_and_say_so():
    fp32 = BoardKey("fewshot_synth_faces", "quick", True, "fp", "{}", "proto")
    assert fp32 == BoardKey("fewshot_synth_faces", "quick", True, "fp", "{}", "proto", "fp32")
    # fp32 boards keep the ids they had before precision was part of the key
    assert fp32.id == content_key("board", "fewshot_synth_faces", "quick", True, "fp", "{}", "proto")[:12]
    mixed = dataclasses.replace(fp32, precision="bf16")
    assert mixed.id != fp32.id
    assert "bf16 mixed precision" in mixed.label and "precision" not in fp32.label


def test_verify_leaves_the_random_streams_and_buffers_as_they_were():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.Dropout(0.5), torch.nn.Linear(8, 2)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    with precision.using("bf16"):
        precision.verify(model, torch.randn(4, 3, 2, 2, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(torch.rand(3), expected)  # dropout drew inside, on a forked generator
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_convolutional_networks_take_channels_last_at_bf16_and_keep_their_layout_at_fp32():
    assert precision.memory_format() is torch.preserve_format
    with precision.using("bf16"):
        assert precision.memory_format() is torch.channels_last


def test_a_cell_computes_deterministically_without_filling_new_memory_and_restores_the_callers_settings():
    before = (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory,
              torch.backends.cudnn.allow_tf32)
    with precision.reproducible():
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert not torch.utils.deterministic.fill_uninitialized_memory and not torch.backends.cudnn.allow_tf32
    assert (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory,
            torch.backends.cudnn.allow_tf32) == before
