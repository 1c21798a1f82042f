"""Plain-text rendering of a cell's result for the terminal."""

from __future__ import annotations

from bench.interfaces import Result


COUNTS = ("n_", "steps", "trials", "episodes", "members", "nonmembers", "identities", "probes", "queries")
"""Metric names (their last part) that are counts, printed as integers."""


def _fmt(value: float, name: str = "") -> str:
    if value != value:
        return "nan"
    last = name.rsplit(".", 1)[-1].removesuffix("_clean")
    if float(value).is_integer() and (last.startswith("n_") or last.endswith(COUNTS[1:])):
        return str(int(value))
    return f"{value:.4f}"


def _score(value: float | None, flag: str | None) -> str:
    return _fmt(value) if value is not None else f"undefined ({flag or 'attack too weak'})"


def claim_text(claim: dict) -> str:
    """Returns ``epsilon=3, delta=1e-09 [unit] (withheld for train)`` from a claim dict.

    A claim the code cannot back reads ``UNBACKED (nominal epsilon=3) [unit]``.
    """
    delta = f", delta={claim['delta']:g}" if claim.get("delta") else ""
    withheld = f" (withheld for {', '.join(claim['withheld'])})" if claim.get("withheld") else ""
    epsilon = f"epsilon={claim['epsilon']:g}{delta}"
    if not claim.get("backed", True):
        epsilon = f"UNBACKED (nominal {epsilon})"
    method = f"{claim['method']}: " if claim.get("method") else ""
    return f"{method}{epsilon} [{claim.get('unit', '')}]{withheld}"


def format_result(result: Result, run_id: str | None = None, where: str | None = None) -> str:
    """Returns a small table of a result: utility, attacks, privacy, claim and where it was logged."""
    params = ", ".join(f"{k}={v}" for k, v in result.params.items()) or "-"
    data = "synthetic" if result.synthetic else "real"
    lines = [
        f"{result.task}  |  {result.mechanism}({params})  |  seed {result.seed}  |  profile {result.profile}  |  {data} data",
        "",
        f"{'metric':<34}{'value':>10}",
        "-" * 44,
    ]
    utility = dict(result.utility)
    for name, value in utility.items():
        if name.endswith("_ci95"):
            continue
        ci = utility.get(f"{name}_ci95")
        shown = _fmt(value, name) + (f" ± {ci:.4f}" if ci is not None and ci == ci else "")
        marker = " *" if name == result.primary_metric else ""
        lines.append(f"{'utility.' + name + marker:<34}{shown:>10}")
    for attack, metrics in result.attacks.items():
        for name, value in metrics.items():
            lines.append(f"{'attack.' + attack + '.' + name:<34}{_fmt(value, name):>10}")
        lines.append(f"{'privacy.' + attack:<34}{_score(result.privacy.get(attack), result.privacy_flags.get(attack)):>10}")
        for target, why in sorted(result.privacy_flags.items()):
            if target.startswith(attack + "."):
                lines.append(f"{'  flag ' + target:<34}{why:>10}")
    if result.attacks:
        lines.append(f"{'privacy_score':<34}{_score(result.privacy_score, 'every attack too weak'):>10}")
    for name, value in result.release_metrics.items():
        lines.append(f"{'release.' + name:<34}{_fmt(value):>10}")
    claim = result.claim
    lines.append("")
    lines.append("claim: " + (claim_text(claim) if claim else "none (no formal guarantee)"))
    if claim and claim.get("note"):
        lines.append(f"  note: {claim['note']}")
    training = result.training_claim
    if training:
        lines.append("training claim: " + claim_text(training))
        if training.get("note"):
            lines.append(f"  note: {training['note']}")
    chain = result.images
    if chain:
        native = chain["native"]["median"]
        upscaled = f"; {chain['upscaled']} upscaled before the mechanism" if chain.get("upscaled") else ""
        lines.append(f"images: native {native[0]}x{native[1]} (median) -> stored {chain['stored'][0]}x"
                     f"{chain['stored'][1]} (the mechanism runs here) -> task input {chain['task_input'][0]}x"
                     f"{chain['task_input'][1]}{upscaled}")
    lines.append(f"runtime: {result.runtime_s:.1f} s on {result.device}   cell {result.cell_key}")
    if run_id:
        lines.append(f"logged: MLflow run {run_id}" + (f" in {where}" if where else ""))
    lines.append("(* primary utility metric; privacy = 1 - retained attack advantage over chance)")
    return "\n".join(lines)
