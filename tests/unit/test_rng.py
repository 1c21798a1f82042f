"""Counter-based per-image random numbers (bench.randomness.rng) against a scalar reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from bench.randomness import rng
from bench.randomness.streams import Streams

_U64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _signed(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


def _mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


def _transitions(z: int) -> int:
    return bin(z ^ (z >> 1)).count("1")


def _mix_gamma_raw(z: int) -> int:
    z = ((z ^ (z >> 33)) * 0xFF51AFD7ED558CCD) & _U64
    z = ((z ^ (z >> 33)) * 0xC4CEB9FE1A85EC53) & _U64
    return (z ^ (z >> 33)) | 1


def _mix_gamma(z: int) -> int:
    z = _mix_gamma_raw(z)
    return z ^ 0xAAAAAAAAAAAAAAAA if _transitions(z) < 24 else z


class _SplittableRandom:
    """java.util.SplittableRandom, transcribed scalar by scalar."""

    def __init__(self, seed: int, gamma: int = _GOLDEN):
        self.seed, self.gamma = seed & _U64, gamma

    def _next_seed(self) -> int:
        self.seed = (self.seed + self.gamma) & _U64
        return self.seed

    def next_long(self) -> int:
        return _mix64(self._next_seed())

    def split(self) -> "_SplittableRandom":
        return _SplittableRandom(self.next_long(), _mix_gamma(self._next_seed()))


@pytest.fixture(params=[1, 2], ids=["numpy-1-thread", "torch-2-threads"])
def threads(request):
    """Runs a test at one thread (numpy's uint64 path) and at two (torch's int64 path)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def test_mix64_reproduces_splitmix64_known_answers(threads: int):
    # Vigna's splitmix64.c: seed 0 starts 0xE220A8397B1DCDAF; seed 1234567 starts as below.
    assert int(rng.mix64(torch.tensor([rng.GOLDEN]))) == _signed(0xE220A8397B1DCDAF)
    parent = _SplittableRandom(1234567)
    assert [parent.next_long() for _ in range(3)] == [6457827717110365317, 3203168211198807973, 9817491932198370423]
    states = torch.tensor([_signed((1234567 + k * _GOLDEN) & _U64) for k in (1, 2, 3)])
    assert rng.mix64(states).tolist() == [_signed(v) for v in (6457827717110365317, 3203168211198807973, 9817491932198370423)]


@pytest.mark.parametrize("seed", [0, 1, 1234567, (1 << 63) - 1, 0x5DEECE66D])
def test_each_image_stream_is_the_first_split_of_its_seed(seed: int, threads: int):
    child = _SplittableRandom(seed).split()
    expected = [_signed(child.next_long()) for _ in range(40)]
    counters = torch.arange(40)
    assert rng.words(torch.tensor([seed]), counters)[0].tolist() == expected
    # Random access: word 1000 without the 1000 before it.
    for _ in range(960):
        child.next_long()
    assert int(rng.words(torch.tensor([seed]), torch.tensor([1000]))[0, 0]) == _signed(child.next_long())


def test_numpy_and_torch_paths_give_the_same_words():
    g = torch.Generator().manual_seed(5)
    seeds = torch.randint(-(1 << 63), (1 << 63) - 1, (48,), generator=g)
    counters = torch.randint(0, 1 << 40, (60, 50), generator=g)
    cases = [(seeds, counters), (seeds[::3], counters[:, ::7]), (seeds, torch.tensor(7)), (seeds[:0], counters)]

    def draw(threads: int) -> list[torch.Tensor]:
        torch.set_num_threads(threads)
        assert rng._uses_numpy(counters) == (threads == 1)
        with torch.inference_mode():
            return [rng.words(s, c) for s, c in cases] + [rng.mix64(counters)]

    before = torch.get_num_threads()
    try:
        host, with_torch = draw(1), draw(2)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(host, with_torch, strict=True):
        assert a.shape == b.shape and torch.equal(a, b)


def test_gamma_is_odd_with_enough_bit_transitions():
    seeds = torch.arange(2000, dtype=torch.int64) * 7919
    _, gamma = rng.stream_keys(seeds)
    assert bool((gamma & 1 == 1).all())
    points = [(s + 2 * _GOLDEN) & _U64 for s in seeds.tolist()]
    assert gamma.tolist() == [_signed(_mix_gamma(z)) for z in points]
    assert any(_transitions(_mix_gamma_raw(z)) < 24 for z in points)  # the fix-up branch ran


def test_maps_follow_their_formulas():
    w = rng.words(torch.tensor([3, 4]), torch.arange(64))
    unsigned = [[v & _U64 for v in row] for row in w.tolist()]
    u32 = rng.uniform(w, torch.float32)
    u64 = rng.uniform(w, torch.float64)
    lap = rng.laplace(w)
    for i in range(2):
        for k in range(64):
            v = unsigned[i][k]
            assert float(u32[i, k]) == (v >> 40) * 2.0**-24
            assert float(u64[i, k]) == (v >> 11) * 2.0**-53
            magnitude = -math.log(((v & ((1 << 53) - 1)) + 1) * 2.0**-53)
            assert float(lap[i, k]) == pytest.approx(-magnitude if v >> 63 else magnitude, rel=1e-15, abs=1e-300)


@pytest.mark.parametrize("count", [9, 10])
def test_normals_take_both_branches_of_each_word(count):
    """Word k gives value k (r cos t) and value m + k (r sin t), m = ceil(count / 2)."""
    seeds, half = torch.tensor([3, 4]), (count + 1) // 2
    unsigned = [[v & _U64 for v in row] for row in rng.words(seeds, torch.arange(half)).tolist()]
    out = rng.normals(seeds, count)
    assert out.shape == (2, count) and out.dtype == torch.float32 and out.is_contiguous()
    for i in range(2):
        for k in range(half):
            v = unsigned[i][k]
            radius = math.sqrt(-2.0 * math.log(((v >> 32) + 1) * 2.0**-32))
            angle = ((v >> 8) & ((1 << 24) - 1)) * 2.0 * math.pi * 2.0**-24
            assert float(out[i, k]) == pytest.approx(radius * math.cos(angle), rel=1e-5, abs=1e-5)
            if half + k < count:
                assert float(out[i, half + k]) == pytest.approx(radius * math.sin(angle), rel=1e-5, abs=1e-5)
    assert torch.equal(rng.normals(seeds, 9)[:, :5], rng.normals(seeds, 10)[:, :5])  # the cosines do not move


def test_normal_pairs_are_independent_normals():
    """Both halves are N(0, 1) and uncorrelated; a pair's c^2 + s^2 is 2 E, as for two independent normals."""
    draws = Streams.for_images(6, "rng/pairs", 64).normal((4002,)).double().numpy()
    cosines, sines = draws[:, :2001].ravel(), draws[:, 2001:].ravel()
    assert stats.kstest(cosines, "norm").pvalue > 1e-3 and stats.kstest(sines, "norm").pvalue > 1e-3
    assert abs(np.corrcoef(cosines, sines)[0, 1]) < 0.015  # 128,064 pairs: standard error 0.0028
    assert stats.kstest((cosines**2 + sines**2) / 2, "expon").pvalue > 1e-3


def test_distributions_pass_ks_tests():
    streams = Streams.for_images(0, "rng/ks", 64)
    shape = (4000,)
    assert stats.kstest(streams.uniform(shape).double().numpy().ravel(), "uniform").pvalue > 1e-3
    assert stats.kstest(streams.uniform(shape, torch.float64).numpy().ravel(), "uniform").pvalue > 1e-3
    assert stats.kstest(streams.normal(shape).double().numpy().ravel(), "norm").pvalue > 1e-3
    assert stats.kstest(streams.laplace(shape, torch.float64).numpy().ravel(), "laplace").pvalue > 1e-3


def test_laplace_tail_and_sign_are_faithful():
    draws = Streams.for_images(1, "rng/tail", 100).laplace((20000,), torch.float64).numpy().ravel()
    for t in (2.0, 5.0, 8.0):
        expected = math.exp(-t)
        observed = np.mean(np.abs(draws) > t)
        assert abs(observed - expected) < 5 * math.sqrt(expected / draws.size) + 1e-6
    assert abs(np.mean(draws > 0) - 0.5) < 0.005
    assert np.isfinite(draws).all() and np.abs(draws).max() <= 36.8


def test_integers_are_in_range_and_uniform():
    draws = Streams.for_images(2, "rng/int", 50).integers(7, (2000,)).numpy().ravel()
    assert draws.min() == 0 and draws.max() == 6
    counts = np.bincount(draws, minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_images_streams_are_independent():
    draws = Streams.for_images(4, "rng/indep", 200).normal((500,)).double().numpy()
    corr = np.corrcoef(draws)
    off = corr[~np.eye(len(corr), dtype=bool)]
    assert np.abs(off).max() < 0.25 and abs(off.mean()) < 0.005


def test_derived_streams_differ_and_are_reproducible():
    streams = Streams.for_images(5, "rng/derive", 10)
    a, b = streams.derive("mask"), streams.derive("mask")
    assert torch.equal(a.seeds, b.seeds)
    assert not torch.equal(a.uniform((50,)), streams.uniform((50,)))
    assert not torch.equal(a.uniform((50,)), streams.derive("other").uniform((50,)))
    assert torch.equal(torch.cat([a[i].normal((8,)) for i in range(10)]), a.normal((8,)))
