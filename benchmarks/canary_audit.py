"""The gradient-canary audit of dp_vit_synth_objects at a profile: one-run bound, exact-plan range, measured mechanism.

Trains the profile's ViT once per ε with the white-box canaries riding in the training's own
loader (``bench.privacy.dpsgd.canaries``), on the synthetic objects' train split, and prints
per ε: the one-run bound and ceiling, the bound of exact simulations of the plan (median and
5-95%), and what the canaries measured (sampling rate, clipping and noise over the plan, the
ε it supports and its lower confidence bound). Optionally a cheat (``--cheat``) shows what a
faulty trainer gives.

    python benchmarks/canary_audit.py --profile quick --epsilon 1 8 inf --seed 0
    python benchmarks/canary_audit.py --profile smoke --epsilon 1 --cheat half_noise
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.data.base import load_dataset  # noqa: E402
from bench.nn.vit import build_vit  # noqa: E402
from bench.privacy.dpsgd.canaries import GradientCanaries  # noqa: E402
from bench.privacy.dpsgd.canary_scores import simulated_scores  # noqa: E402
from bench.privacy.dpsgd.method import Schedule, TrainingMethod  # noqa: E402
from bench.privacy.dpsgd.train import train_private  # noqa: E402
from bench.privacy.mia.one_run import one_run_audit  # noqa: E402
from bench.randomness.seeding import derive_seed, make_generator  # noqa: E402

CANARIES = {"smoke": 100, "quick": 2000, "paper": 5000}
"""The membership preset's canary count per profile."""


def _cheat(name: str) -> None:
    """Patches Opacus into one of the faulty trainers the unit tests use."""
    import opacus.optimizers.optimizer as dp

    if name == "half_noise":
        honest = dp._generate_noise
        dp._generate_noise = lambda std, reference, generator=None, secure_mode=False: honest(
            std * 0.5, reference, generator=generator, secure_mode=secure_mode)
    elif name == "twice_the_rate":
        import opacus.data_loader as loaders

        class Greedy(loaders.DPDataLoader):
            def __init__(self, dataset, *, sample_rate, **kwargs):
                super().__init__(dataset, sample_rate=2 * sample_rate, **kwargs)

        loaders.DPDataLoader = Greedy
    elif name != "none":
        raise SystemExit(f"unknown cheat {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Runs the audit per ε and prints the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick", choices=sorted(CANARIES))
    parser.add_argument("--epsilon", nargs="+", default=["1", "8"], help="target ε values ('inf': non-private)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--simulations", type=int, default=20)
    parser.add_argument("--cheat", default="none", choices=["none", "half_noise", "twice_the_rate"])
    args = parser.parse_args(argv)
    _cheat(args.cheat)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    preset = yaml.safe_load((ROOT / "tasks/presets/dp_vit_synth_objects.yaml").read_text())[args.profile]
    data_opts = {k: v for k, v in preset["data"].items() if k in ("n_train", "n_val", "n_test", "n_population")}
    with tempfile.TemporaryDirectory() as cache:
        train = load_dataset("synth_objects", None, data_opts, Path(cache))["train"]
    images, labels = train.images[:], train.labels.long()
    n = len(images)
    delta = 1.0 / (10 * n)
    count = CANARIES[args.profile]
    coins = (torch.rand(count, generator=make_generator(args.seed, "membership", "gradient canary coins")) < 0.5).numpy()
    model = preset["model"]
    schedule = Schedule(**{k: v for k, v in preset["schedule"].items() if k in ("epochs", "batch_size", "lr")})
    size = int(images.shape[-1])
    classes = int(labels.max()) + 1
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else "?"
    print(f"dp_vit_synth_objects at {args.profile}: {n} training images, {count} canaries "
          f"({int(coins.sum())} included), delta {delta:.3g}, seed {args.seed}, cheat {args.cheat}")
    print(f"machine: {cpu}, torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads")
    print("| training | one-run bound (ceiling) | exact plan: median (5-95%) | measured: rate, clip, noise | "
          "measured eps (>= low) | s |")
    print("|---|---|---|---|---|---|")
    for text in args.epsilon:
        epsilon = math.inf if text == "inf" else float(text)
        method = TrainingMethod(epsilon=epsilon, delta=delta if math.isfinite(epsilon) else 0.0)
        canaries = GradientCanaries(coins, args.seed)
        start = time.perf_counter()
        trained = train_private(lambda: build_vit(size, classes=classes, **model), images, labels, method, schedule,
                                args.seed, "cpu", canaries=canaries)
        seconds = time.perf_counter() - start
        got = one_run_audit(canaries.scores, coins, delta)
        row = [f"{'non-private' if not method.private else f'DP-SGD flat ε={epsilon:g}'}",
               f"{got['epsilon_lower_bound']:.2f} ({got['epsilon_ceiling']:.2f})"]
        if method.private:
            sigma, rate = float(trained.report["noise_multiplier"]), float(trained.report["sample_rate"])
            exact = [one_run_audit(simulated_scores(canaries.geometry, coins, sigma * method.max_grad_norm, rate,
                                                    canaries.steps, derive_seed(args.seed, "membership", "exact plan",
                                                                                i)), coins, delta)
                     ["epsilon_lower_bound"] for i in range(args.simulations)]
            low, high = np.quantile(exact, [0.05, 0.95])
            seen = canaries.meter.result(rate, delta)
            row += [f"{np.median(exact):.2f} ({low:.2f}-{high:.2f})",
                    f"{seen['observed.sample_rate']:.4f} (plan {rate:.4f}), x{seen['observed.clip_ratio']:.3f}, "
                    f"x{seen['observed.noise_ratio']:.3f} (min x{seen['observed.noise_ratio_min']:.3f})",
                    f"{seen['observed.epsilon']:.2f} (>= {seen['observed.epsilon_low']:.2f})"]
        else:
            row += ["-", "-", "-"]
        row.append(f"{seconds:.0f}")
        print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
