"""Plain-text rendering of a cell's result for the terminal."""

from __future__ import annotations

from bench.core import scores
from bench.core.result import Result
from bench.system import precision

COUNTS = ("n_", "steps", "trials", "episodes", "members", "nonmembers", "identities", "probes", "queries", "faces",
          "images", "folds")
"""Metric names (their last part) that are counts, printed as integers."""


def _fmt(value: float, name: str = "") -> str:
    if value != value:
        return "nan"
    last = name.rsplit(".", 1)[-1].removesuffix("_clean")
    if float(value).is_integer() and (last.startswith("n_") or last.endswith(COUNTS[1:])):
        return str(int(value))
    return f"{value:.4f}"


def _score(value: float | None, flag: str | None, se: float | None = None) -> str:
    if value is None:
        return f"undefined ({flag or 'attack too weak'})"
    return _fmt(value) + (f" ± {se:.4f}" if se is not None else "")


def _imprecise(se: float | None) -> str | None:
    """Returns the ``imprecise`` flag of a score whose standard error stands for a too wide 95% interval."""
    if se is None or 2 * scores.Z95 * se <= scores.IMPRECISE_WIDTH:
        return None
    return f"{scores.IMPRECISE} (95% interval {2 * scores.Z95 * se:.2f} wide, more than {scores.IMPRECISE_WIDTH:g})"


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
    mixed = precision.recorded(result.versions)
    mixed = "" if mixed == precision.DEFAULT else f"  |  {mixed} mixed precision"
    lines = [
        f"{result.task}  |  {result.mechanism}({params})  |  seed {result.seed}  |  profile {result.profile}  |  {data} data"
        + mixed,
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
            if not name.startswith("privacy_se"):
                lines.append(f"{'attack.' + attack + '.' + name:<34}{_fmt(value, name):>10}")
        privacy, flag = result.privacy.get(attack), result.privacy_flags.get(attack)
        lines.append(f"{'privacy.' + attack:<33} {_score(privacy, flag, metrics.get('privacy_se')):>10}")
        for target, why in sorted(result.privacy_flags.items()):
            if target.startswith(attack + ".") or (target == attack and privacy is not None):
                lines.append(f"{'  flag ' + target:<33} {why:>10}")
    for attack, why in result.skipped_attacks.items():
        lines.append(f"{'attack.' + attack:<34}{'skipped':>10}  ({why})")
    if result.attacks:
        se = result.privacy_score_se
        lines.append(f"{'privacy_score':<34}{_score(result.privacy_score, 'every attack too weak', se):>10}")
        defined = sorted((score, name) for name, score in result.privacy.items() if score is not None)
        if result.privacy_score is not None and defined:
            lines.append(f"{'  set by':<34}{defined[0][1]:>10}")
        if result.privacy_score is not None and _imprecise(se):
            lines.append(f"{'  flag privacy_score':<34}{_imprecise(se):>10}")
    for name, value in result.release_metrics.items():
        lines.append(f"{'release.' + name:<34}{_fmt(value):>10}")
    claim = result.claim
    lines.append("")
    lines.append("claim: " + (f"{claim_text(claim)} (unaudited: 'bench audit' checks it empirically)" if claim
                              else "none (no formal guarantee)"))
    if claim and claim.get("note"):
        lines.append(f"  note: {claim['note']}")
    training = result.training_claim
    if training:
        lines.append("training claim: " + claim_text(training))
        if training.get("note"):
            lines.append(f"  note: {training['note']}")
        audit = _one_run_audit(result.attacks.get("membership", {}))
        if audit:
            lines.append(f"  audit: {audit}")
    chain = result.images
    if chain:
        native = chain["native"]["median"]
        upscaled = f"; {chain['upscaled']} upscaled before the mechanism" if chain.get("upscaled") else ""
        channels = {1: ", 1 channel", 3: ", 3 channels"}.get(chain.get("channels"), "")
        lines.append(f"images: native {native[0]}x{native[1]} (median) -> released {chain['stored'][0]}x"
                     f"{chain['stored'][1]}{channels} ({_released_at(chain)}) -> model input "
                     f"{chain['task_input'][0]}x{chain['task_input'][1]}{upscaled}")
    if result.groups:
        lines += ["", format_groups(result.groups)]
    lines.append(f"runtime: {result.runtime_s:.1f} s on {result.device}   cell {result.cell_key}")
    if result.stage_seconds:
        stages = sorted(result.stage_seconds, key=_stage_order)
        lines.append("  stages: " + ", ".join(f"{stage} {result.stage_seconds[stage]:.1f} s" for stage in stages))
    if run_id:
        lines.append(f"logged: MLflow run {run_id}" + (f" in {where}" if where else ""))
    lines.append("(* primary utility metric, ± its 95% interval's half-width; privacy = 1 - retained attack advantage "
                 "over chance, ± its standard error)")
    return "\n".join(lines)


def _one_run_audit(metrics: dict) -> str:
    """Returns the one-run canary audit of the training claim in words ('' when none ran)."""
    bound = metrics.get("audit.epsilon_lower_bound")
    if bound is None:
        return ""
    kind = "gradient" if metrics.get("audit.gradient_canaries") else "input"
    text = (f"one-run audit with {int(metrics.get('audit.canaries', 0)):,} {kind} canaries: epsilon >= {bound:.3g} "
            f"at {100 * metrics.get('audit.confidence', 0.95):g}% confidence (ceiling "
            f"{metrics.get('audit.epsilon_ceiling', float('nan')):.3g}")
    if "audit.epsilon_exact" in metrics:
        text += f"; an exact implementation of the plan: {metrics['audit.epsilon_exact']:.3g}"
        if "audit.epsilon_exact_p05" in metrics:
            text += f" ({metrics['audit.epsilon_exact_p05']:.3g}-{metrics['audit.epsilon_exact_p95']:.3g})"
    if "audit.epsilon_lower_bound_clean" in metrics:
        text += f"; non-private twin: {metrics['audit.epsilon_lower_bound_clean']:.3g}"
    text += ")"
    if "audit.observed.epsilon_low" in metrics:
        text += (f"; measured by its canaries: sampling rate {metrics['audit.observed.sample_rate']:.3g}, clipping "
                 f"x{metrics['audit.observed.clip_ratio']:.2f}, noise x{metrics['audit.observed.noise_ratio']:.2f} of "
                 f"the plan, epsilon {metrics['audit.observed.epsilon']:.3g} (at least "
                 f"{metrics['audit.observed.epsilon_low']:.3g})")
    if metrics.get("audit.refutes_claim"):
        text += " - REFUTES the claim"
    return text


def group_rows(groups: dict) -> tuple[list[str], list[list[str]], list[str]]:
    """Returns the per-group table of ``Result.groups``: header, rows (one per attribute value) and gap lines."""
    utility = groups.get("utility")
    attacks = groups.get("attacks", {})
    header = ["attribute", "group", "n"]
    if utility:
        header += [f"{utility['metric']} (95% CI)", f"{utility['metric']}_clean"]
    header += [f"{name}: {part['metric']} / privacy" for name, part in attacks.items()]
    attrs = list(dict.fromkeys([*(utility["table"] if utility else {}),
                                *(a for part in attacks.values() for a in part["table"])]))
    rows = []
    for attr in attrs:
        values = list(dict.fromkeys([*((utility or {}).get("table", {}).get(attr, {})),
                                     *(v for part in attacks.values() for v in part["table"].get(attr, {}))]))
        for value in values:
            row = [attr, value]
            cell = (utility or {}).get("table", {}).get(attr, {}).get(value) if utility else None
            sizes = [cell["n"]] if cell else []
            if utility:
                row += _group_metric(cell, utility["metric"]) + [_group_plain(cell, utility["metric"] + "_clean")]
            for part in attacks.values():
                hit = part["table"].get(attr, {}).get(value)
                sizes.append(hit["n"] if hit else None)
                if hit is None or "flag" in hit and hit.get("privacy") is None and part["metric"] not in hit:
                    row.append(hit["flag"] if hit else "–")
                else:
                    privacy = _fmt(hit["privacy"]) if hit.get("privacy") is not None else f"undefined ({hit['flag']})"
                    row.append(f"{_group_metric(hit, part['metric'])[0]} / {privacy}")
            row.insert(2, "/".join(str(s) for s in dict.fromkeys(s for s in sizes if s is not None)) or "–")
            rows.append(row)
    gaps = []
    for name, part in ([("utility", utility)] if utility else []) + list(attacks.items()):
        for attr, gap in part["gaps"].items():
            ci = f" ± {gap['ci95']:.4f}" if gap.get("ci95") is not None else ""
            gaps.append(f"largest {name} gap in {attr}: {gap['metric']} {gap['gap']:.4f}{ci} ({gap['high']} − {gap['low']})")
    if groups.get("worst_privacy"):
        w = groups["worst_privacy"]
        gaps.append(f"worst group's privacy: {w['privacy']:.4f} ({w['group']}, {w['attack']})")
    return header, rows, gaps


def _group_metric(row: dict | None, metric: str) -> list[str]:
    if not row or row.get(metric) is None:
        return [row.get("flag", "–") if row else "–"]
    ci = row.get(f"{metric}_ci95")
    return [f"{row[metric]:.4f}" + (f" ± {ci:.4f}" if ci is not None else "")]


def _group_plain(row: dict | None, metric: str) -> str:
    return f"{row[metric]:.4f}" if row and row.get(metric) is not None else "–"


def _released_at(chain: dict) -> str:
    """Says why the mechanism ran at the released size: the images' own, their smallest common, or the user's cap."""
    native, stored = chain["native"], chain["stored"]
    if list(native["min"]) == list(native["max"]) == list(stored):
        return "the mechanism runs here, at the images' own size"
    if chain.get("size_option"):
        return f"the mechanism runs here; task.data.size={chain['size_option'][0]}x{chain['size_option'][1]} caps it"
    return "the mechanism runs here, at the images' smallest common size"


def _stage_order(stage: str) -> tuple[int, str]:
    """Data, release and task first, then the attacks by name."""
    first = ("data", "release", "task")
    return (first.index(stage), "") if stage in first else (len(first), stage)


def format_groups(groups: dict, markdown: bool = False) -> str:
    """Returns the per-group table as aligned text (or Markdown), then the largest gaps."""
    if not groups:
        return ""
    header, rows, gaps = group_rows(groups)
    note = (groups.get("utility") or {}).get("note")
    title = f"by group (no number below {groups['min_size']} targets" + (f"; utility: {note}" if note else "") + ")"
    if markdown:
        lines = [title, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    else:
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        lines = [title] + ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    return "\n".join(lines + [""] + gaps)
