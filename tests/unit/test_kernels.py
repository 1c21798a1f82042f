"""Fused kernels: compiled and eager runs agree, and a broken compiler falls back."""

from __future__ import annotations

import pytest
import torch

from bench.core.registry import mechanisms
from bench.errors import BenchError
from bench.randomness import rng
from bench.randomness.streams import Streams
from bench.system import kernels

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]
"""Compiled means Inductor's C++ on the CPU and Triton on CUDA: both must give the eager numbers."""


@kernels.kernel
def _words(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    return rng.words(seeds, counters)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_words_are_the_eager_words_exactly(device):
    seeds = Streams.for_images(0, "kernels", 33).seeds
    counters = torch.arange(517)
    on_cpu = _words.eager(seeds, counters)
    seeds, counters = seeds.to(device), counters.to(device)
    assert kernels.backend(device) == "compiled"
    with kernels.using("compiled"):
        compiled = _words(seeds, counters)
    assert torch.equal(compiled, _words.eager(seeds, counters))
    assert torch.equal(compiled.cpu(), on_cpu)  # the same integers on every device


def _draws(streams: Streams) -> tuple[torch.Tensor, ...]:
    return (streams.normal((3, 40)), streams.laplace((3, 40), torch.float64), streams.uniform((3, 40)),
            streams.normal((3, 7)))  # an odd count: the last word's sine is not used


def _assert_same_draws(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> None:
    a, b = [x.cpu() for x in a], [x.cpu() for x in b]
    torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a[3], b[3], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a[1], b[1], rtol=1e-12, atol=1e-12)
    assert torch.equal(a[2], b[2])


@pytest.mark.slow  # compiles four draws: 65-90 s cold on 2 cores; the fused dp_pix test below compiles Laplace draws
@pytest.mark.parametrize("device", DEVICES)
def test_compiled_draws_match_eager_to_float_precision(monkeypatch: pytest.MonkeyPatch, device):
    streams = Streams.for_images(1, "kernels", 17)
    with kernels.using("compiled"):
        compiled = _draws(streams.to(device))
    assert all(x.device.type == device for x in compiled)
    monkeypatch.setenv(kernels.ENV, "0")
    assert kernels.backend(device) == "eager"
    _assert_same_draws(compiled, _draws(streams.to(device)))
    _assert_same_draws(compiled, _draws(streams))  # and the CPU's draws


@pytest.mark.parametrize(("name", "params"), [
    pytest.param("gaussian_noise", {"sigma": 40.0}, marks=pytest.mark.slow),  # 30 s cold; dp_pix stays in CI
    ("dp_pix", {"epsilon": 0.5, "block": 2})])
@pytest.mark.parametrize("device", DEVICES)
def test_fused_mechanisms_match_their_eager_runs(monkeypatch: pytest.MonkeyPatch, name: str, params: dict, device):
    images = torch.randint(0, 256, (12, 3, 30, 22), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    streams = Streams.for_images(2, "kernels", 12)
    mech = mechanisms.get(name)(**params)
    with kernels.using("compiled"):
        fused = mech.apply(images.to(device), generator=streams)
    monkeypatch.setenv(kernels.ENV, "0")
    for eager in (mech.apply(images.to(device), generator=streams), mech.apply(images, generator=streams)):
        diff = (fused.cpu().int() - eager.cpu().int()).abs()
        assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 1e-3


class _Subclass(Streams):
    def normal(self, shape, dtype=torch.float32):  # noqa: D102 - a plugin's own draws
        return torch.zeros((len(self), *shape), dtype=dtype)


def test_a_streams_subclass_is_honoured_instead_of_the_fused_draws():
    images = torch.full((2, 3, 8, 8), 100, dtype=torch.uint8)
    out = mechanisms.get("gaussian_noise")(sigma=50.0).apply(images, generator=_Subclass(torch.tensor([1, 2])))
    assert torch.equal(out, images)


def test_a_failing_compiler_falls_back_to_eager_with_one_warning(monkeypatch: pytest.MonkeyPatch):
    def broken(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no C++ compiler\nmore detail")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(kernels, "_failed", {})
    fresh = kernels.Kernel(rng.words)
    seeds, counters = torch.tensor([5, 6]), torch.arange(9)
    with kernels.using("compiled"):
        with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
            out = fresh(seeds, counters)
        assert torch.equal(out, rng.words(seeds, counters))
        assert kernels.backend("cpu") == "eager"
        assert torch.equal(fresh(seeds, counters), out)


def test_forced_compile_lets_the_failure_raise(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: (lambda *a: (_ for _ in ()).throw(RuntimeError("boom"))))
    monkeypatch.setattr(kernels, "_failed", {})
    monkeypatch.setenv(kernels.ENV, "1")
    with pytest.raises(RuntimeError, match="boom"):
        kernels.Kernel(rng.words)(torch.tensor([1]), torch.arange(3))


def test_a_bad_setting_is_a_user_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(kernels.ENV, "sometimes")
    with pytest.raises(BenchError, match="BENCH_COMPILE"):
        kernels.backend("cpu")


@pytest.mark.slow  # compiles about 24 kernel variants: 80-110 s cold on 2 cores
def test_many_image_sizes_and_draw_shapes_stay_compiled(recwarn: pytest.WarningsRecorder):
    from bench.randomness import streams as streams_module
    from mechanisms import dp_pix, gaussian_noise

    with kernels.using("compiled"):
        for k, shape in enumerate([(3, 5, 7), (1, 9, 4), (3, 1, 1), (2, 16, 16), (3, 33, 18), (1, 2, 64)]):
            for n in (1, 2, 5):
                streams = Streams.for_images(k, "kernels/many", n)
                images = torch.randint(0, 256, (n, *shape), dtype=torch.uint8)
                mechanisms.get("gaussian_noise")(sigma=10.0).apply(images, generator=streams)
                mechanisms.get("dp_pix")(block=2).apply(images, generator=streams)
                streams.normal(shape[1:])
                streams.uniform(shape, torch.float64)
    compiled = [gaussian_noise._add_noise, dp_pix._noisy_cells, streams_module._normal, streams_module._uniform53]
    assert not any(k._over_limit for k in compiled)
    assert kernels.backend("cpu") == "compiled"
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_kernel_over_the_recompile_limit_runs_eagerly_alone(monkeypatch: pytest.MonkeyPatch):
    def over_limit(fn, **kwargs):
        def run(*args):
            raise torch._dynamo.exc.FailOnRecompileLimitHit("recompile limit")
        return run

    monkeypatch.setattr(torch, "compile", over_limit)
    monkeypatch.setattr(kernels, "_failed", {})
    fresh = kernels.Kernel(rng.words)
    seeds, counters = torch.tensor([5, 6]), torch.arange(9)
    with kernels.using("compiled"):
        assert torch.equal(fresh(seeds, counters), rng.words(seeds, counters))
    assert fresh._over_limit and kernels.backend("cpu") == "compiled"


def test_small_work_runs_eagerly_in_auto_mode_whatever_the_process_did_before(monkeypatch: pytest.MonkeyPatch):
    assert kernels.choose("cpu", kernels.PAYBACK_VALUES - 1) == "eager"
    assert kernels.choose("cpu", kernels.PAYBACK_VALUES) == "compiled"
    monkeypatch.setenv(kernels.ENV, "1")
    assert kernels.choose("cpu", 10) == "compiled"
    monkeypatch.setenv(kernels.ENV, "0")
    assert kernels.choose("cpu", 10**12) == "eager"
    monkeypatch.setenv(kernels.ENV, "auto")

    @kernels.kernel
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled small work"))
    with kernels.using(kernels.choose("cpu", 100)):
        assert torch.equal(double(torch.ones(3)), torch.full((3,), 2.0))
    assert torch.equal(double(torch.ones(3)), torch.full((3,), 2.0))  # no release around it: the call's size decides


def test_a_mechanism_decides_by_its_batch_unless_a_release_decided(monkeypatch: pytest.MonkeyPatch):
    from mechanisms import _ops, gaussian_noise

    compiled_calls = []

    def counting(fn, **kwargs):
        return lambda *args: compiled_calls.append(args[0].numel()) or fn(*args)

    monkeypatch.setattr(torch, "compile", counting)
    monkeypatch.setattr(gaussian_noise._add_noise, "_compiled", None)
    monkeypatch.setattr(kernels, "PAYBACK_VALUES", 20_000)
    monkeypatch.setattr(_ops, "CHUNK_VALUES", 5_000)  # every kernel call is below the payback, the batch is not
    images = torch.randint(0, 256, (12, 3, 30, 22), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    streams = Streams.for_images(3, "kernels", 12)
    mech = mechanisms.get("gaussian_noise")(sigma=20.0)
    decided = mech.apply(images, generator=streams)
    assert len(compiled_calls) > 1 and max(compiled_calls) < 20_000
    compiled_calls.clear()
    with kernels.using("eager"):  # a release decided for its split
        assert torch.equal(mech.apply(images, generator=streams), decided)
    assert not compiled_calls
    assert torch.equal(mech.apply(images[:6], generator=streams[:6]), decided[:6])  # 11,880 values: eager
    assert not compiled_calls
    from bench.randomness import streams as streams_module

    monkeypatch.setattr(streams_module._normal, "_compiled", None)
    Streams.for_images(0, "kernels", 100).normal((300,))  # 30,000 draws from arguments of 100 and 300 values
    assert compiled_calls == [100]


def test_a_release_records_the_path_its_kernels_took(tmp_path):
    from bench.core.interfaces import RunContext
    from bench.data.base import ImageSet, Splits
    from bench.release.dataset import make_release

    images = torch.randint(0, 256, (8, 3, 16, 16), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    splits = Splits("toy", {"train": ImageSet(images, torch.arange(8))}, "fp")
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)
    release = make_release(splits, mechanisms.get("dp_pix")(epsilon=1, block=4), ctx)
    assert release.kernels == "eager"
    assert make_release(splits, mechanisms.get("dp_pix")(epsilon=1, block=4), ctx).kernels == "eager"  # cached
