"""The membership adversary's one-run audit of DP-SGD training (Steinke, Nasr & Jagielski 2023).

Two kinds of canaries (``canary_kind``):

- ``gradient`` (the default; white-box, their §6): canaries are records of the training's
  own loader whose per-sample gradient rows the auditor chooses, in every parameter tensor;
  they go through the training's clipping and noise and are scored from every step's noisy
  gradient, with the other records' contribution subtracted
  (:mod:`bench.privacy.dpsgd.canaries`). Beside the bound, ``audit.epsilon_exact`` is the
  bound the same audit gives on an exact simulation of the plan (σ, q, steps, the same
  canary layout; the median of 20 simulations, with their 5-95% range), and
  ``audit.observed.*`` the mechanism the canaries measured (sampling rate, clipping, noise
  by tensor) with the ε it supports (:mod:`bench.privacy.dpsgd.observed`). A one-run bound
  or a measured ε whose lower confidence bound is above the claim refutes the claim.
- ``input`` (black-box): ``canaries`` images of the population split, each given a wrong label (a seeded random
other class, so that a model that trains on one must memorise it), are each included in
the training set by a seeded fair coin; one model is trained by the cell's method (last
epoch; the canaries count as training records in its accounting) on the release's train
split plus the included canaries, the canaries are scored by minus their loss, and
:func:`bench.privacy.mia.one_run.one_run_audit` turns the ranked scores into an epsilon lower bound
with its ceiling (the bound a perfect guesser would reach on the same coins).

The same audit runs on the non-private model (clean train split plus the same canaries):
its bound shows how close the audit can come to its ceiling when nothing protects the
canaries. A private bound far below the claim means little when that one is also far
below its ceiling.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from bench.core.interfaces import Release, RunContext
from bench.data.base import ImageSet, Splits
from bench.privacy.dpsgd.canary_scores import PER_SAMPLE_TOLERANCE, simulated_scores
from bench.privacy.mia.one_run import one_run_audit
from bench.randomness.seeding import derive_seed, make_generator
from bench.storage.cache import warn

EXACT_SIMULATIONS = 20
"""Simulations of an exact implementation of the plan behind ``audit.epsilon_exact`` (median, 5-95% range)."""


def model_view(task: Any) -> Callable[[ImageSet], ImageSet]:
    """Returns the task's map from stored images to its models' inputs (``model_inputs``; none: as stored)."""
    return getattr(task, "model_inputs", None) or (lambda images: images)


def canary_set(population: ImageSet, count: int, classes: int, seed: int) -> tuple[ImageSet, np.ndarray]:
    """Returns ``count`` mislabelled canaries drawn from ``population`` and their inclusion coins.

    Args:
        population: Images the canaries are drawn from (never training records).
        count: Canaries.
        classes: Number of classes (at least 2).
        seed: The run's seed (the draw, the wrong labels and the coins derive from it).
    """
    pick = torch.randperm(len(population), generator=make_generator(seed, "membership", "canaries"))[:count]
    chosen = population.subset(pick.sort().values)
    shift = torch.randint(1, classes, (len(chosen),), generator=make_generator(seed, "membership", "canary labels"))
    coins = torch.rand(len(chosen), generator=make_generator(seed, "membership", "canary coins")) < 0.5
    labels = (chosen.labels.long() + shift) % classes
    return ImageSet(images=chosen.images, labels=labels), coins.numpy()


def gradient_audit_metrics(task: Any, clean: Splits, released: Release, claim: Any, delta: float, classes: int,
                           cfg: Any, ctx: RunContext) -> dict[str, float]:
    """Returns the white-box one-run audit's metrics (``audit.*``), of the cell's training and the non-private one.

    Args:
        task: The cell's task (``canary_audit_run`` trains with the canaries).
        clean: The clean splits.
        released: The release.
        claim: The cell's DP-SGD training claim (None: only the non-private audit runs).
        delta: The claim's delta.
        classes: Number of classes.
        cfg: The adversary's settings (``canaries``, ``confidence``).
        ctx: The run.
    """
    count = cfg.canaries
    coins = (torch.rand(count, generator=make_generator(ctx.seed, "membership", "gradient canary coins")) < 0.5).numpy()
    beta = 1.0 - cfg.confidence
    out = {"audit.canaries_requested": float(count), "audit.gradient_canaries": 1.0,
           "audit.confidence": float(cfg.confidence)}
    runs = [("_clean", clean["train"], clean.fingerprint, False)]
    if claim is not None:
        runs.insert(0, ("", released.splits["train"], released.key, True))
    for suffix, train, key, private in runs:
        ctx.log(f"membership: one-run audit with {int(coins.sum())} of {count} gradient canaries included "
                f"({'the cell' if private else 'non-private'})")
        try:
            run = task.canary_audit_run(train, key, private, coins, classes, ctx, delta=delta)
        except ValueError as exc:  # no parameter tensor large enough for the canaries
            warn(f"attack 'membership': no gradient-canary audit ({exc}); lower membership.canaries")
            return out
        got = one_run_audit(run["scores"], coins, delta, beta=beta)
        out.update({f"audit.{k}{suffix}": v for k, v in got.items()})
        out[f"audit.canary_norm{suffix}"] = float(run["norm"])
        out[f"audit.steps{suffix}"] = float(run["steps"])
        if private and run["noise_std"] > 0:
            exact = [one_run_audit(simulated_scores(run["geometry"], coins, run["noise_std"], run["sample_rate"],
                                                    run["steps"], derive_seed(ctx.seed, "membership", "exact plan", i)),
                                   coins, delta, beta=beta)["epsilon_lower_bound"] for i in range(EXACT_SIMULATIONS)]
            out["audit.epsilon_exact"] = float(np.median(exact))
            out["audit.epsilon_exact_p05"], out["audit.epsilon_exact_p95"] = (float(v) for v in
                                                                              np.quantile(exact, [0.05, 0.95]))
            out.update({f"audit.{k}": float(v) for k, v in run.get("observed", {}).items()})
            out["audit.claim_epsilon"] = float(claim.epsilon)
            out.update(_refutation(got["epsilon_lower_bound"], out.get("audit.observed.epsilon_low", 0.0),
                                   out.get("audit.observed.per_sample_error", 0.0), float(claim.epsilon)))
    return out


def _refutation(bound: float, observed_low: float, row_error: float, claim: float) -> dict[str, float]:
    """``audit.refutes_claim`` (and a warning): the one-run bound or the measured ε above the claim, or wrong rows.

    Wrong rows: the per-sample machinery's gradient of a training record differs from
    autograd's by more than :data:`~bench.privacy.dpsgd.canaries.PER_SAMPLE_TOLERANCE`, so the
    clipping bounds something other than each record's gradient.
    """
    reasons = []
    if bound > claim:
        reasons.append(f"the one-run audit's epsilon lower bound {bound:.3g} exceeds the claimed epsilon {claim:g}")
    if observed_low > claim:
        reasons.append(f"the epsilon its canaries measured ({observed_low:.3g} at least) exceeds the claimed "
                       f"epsilon {claim:g}")
    if row_error > PER_SAMPLE_TOLERANCE:
        reasons.append(f"its per-sample gradients differ from each record's own gradient by {row_error:.2g} "
                       f"(relative)")
    if reasons:
        warn(f"attack 'membership': {'; '.join(reasons)}: the training does not meet its claim")
    wrong = observed_low > claim or row_error > PER_SAMPLE_TOLERANCE
    return {"audit.refutes_claim": float(bool(reasons)), "audit.observed_refutes_claim": float(wrong)}


def audit_metrics(task: Any, clean: Splits, released: Release, private: bool, classes: int, delta: float,
                  cfg: Any, ctx: RunContext) -> dict[str, float]:
    """Returns the black-box (input canary) one-run audit's metrics (``audit.*``), of the cell and the non-private twin.

    The cell's own audit runs only for a DP-SGD claim (``private``); the non-private
    audit always runs, as the measure of the audit's strength (``audit.*_clean``).

    Args:
        task: The cell's task (``reference_classifiers`` trains the audited models).
        clean: The clean splits.
        released: The release.
        private: The cell's training carries a DP-SGD claim.
        classes: Number of classes.
        delta: The claim's delta (the bound is stated at it).
        cfg: The adversary's settings (``canaries``, ``confidence``).
        ctx: The run.
    """
    count = min(cfg.canaries, len(clean["population"]))
    if count < cfg.canaries:
        warn(f"attack 'membership': {cfg.canaries} canaries asked, the population split has {count}; "
             f"reduced to {count}")
    out = {"audit.canaries_requested": float(cfg.canaries), "audit.confidence": float(cfg.confidence)}
    if count < 2:
        warn(f"attack 'membership': {count} canaries cannot be audited (at least 2); no one-run audit")
        return out
    runs = [("_clean", clean, clean.fingerprint, False)]
    if private:
        runs.insert(0, ("", released.splits, released.key, True))
    for suffix, data, key, dp in runs:
        canaries, coins = canary_set(data["population"], count, classes, ctx.seed)
        train = data["train"]
        union = model_view(task)(ImageSet(images=torch.cat([train.images[:], canaries.images]),
                                          labels=torch.cat([train.labels.long(), canaries.labels])))
        index = torch.cat([torch.arange(len(train)), len(train) + torch.from_numpy(np.flatnonzero(coins))])
        ctx.log(f"membership: one-run audit, {int(coins.sum())} of {count} canaries included "
                f"({'the cell' if dp else 'non-private'})")
        model = task.reference_classifiers(union, f"{key}|canaries|{count}", dp, [index], classes, ctx)[0]
        scores = -model.losses(union.images[len(train):], canaries.labels).cpu().numpy()
        got = one_run_audit(scores, coins, delta, beta=1.0 - cfg.confidence)
        out.update({f"audit.{k}{suffix}": v for k, v in got.items()})
    return out
