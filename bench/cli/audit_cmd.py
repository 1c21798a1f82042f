"""``bench audit``: an empirical DP audit of a mechanism's formal claim."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any

from bench.cli.common import add_allow_long_option, path_arg
from bench.errors import BenchError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench audit``."""
    p = subparsers.add_parser(
        "audit", help="audit a mechanism's formal claim empirically (Clopper-Pearson lower bound on epsilon)",
        description="Scans the neighbouring pairs of the claim's unit (every pixel, two image sizes, several "
                    "contents) on a few trials each, releases the pair that separates best N times per input, "
                    "chooses a distinguishing test over the whole release on min(N, 5000) other trials, and turns "
                    "its error counts into a lower bound on epsilon. The verdict is failed when the bound exceeds "
                    "the claim, inconclusive when it does not but N is below the trials needed to refute a 1.25x "
                    "over-claim, else passed. Exit 0 when the claim is not refuted (passed or inconclusive, or no "
                    "claim), 1 when it is (failed), 2 on a usage error.",
    )
    p.add_argument("--mechanism", required=True, help="registered mechanism name (bench list mechanisms)")
    p.add_argument("--param", action="append", metavar="K=V", help="mechanism parameter (repeatable)")
    p.add_argument("--trials", default="auto",
                   help="counted trials per input, an integer >= 100, or auto: the trials the claim needs to pass, "
                        "at most 200000 (default auto)")
    p.add_argument("--seed", default="0", help="base seed of the trials (default 0)")
    p.add_argument("--confidence", default="0.95", help="confidence of the lower bound (default 0.95)")
    p.add_argument("--image-size", default="16", help="side of the square audit images (default 16)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--mechanism-file", type=path_arg, default=None, help="a Python file that registers a mechanism")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_allow_long_option(p, "audit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("-v", "--verbose", action="store_true", help="progress lines (the default; kept for older scripts)")
    p.set_defaults(func=audit)


def _integer(option: str, text: str, low: int, high: int | None = None) -> int:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and low <= value <= (math.inf if high is None else high)):
        bounds = f">= {low}" if high is None else f"in [{low}, {high:,}]"
        alternative = " or auto" if option == "--trials" else ""
        raise BenchError(f"{option} must be an integer {bounds}{alternative}, got {text!r}")
    return int(value)


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value < 1.0:
        raise BenchError(f"--confidence must be a number strictly between 0 and 1, got {text!r}")
    return value


def audit(args: argparse.Namespace) -> int:
    """Validates everything, audits the claim, prints the report and its verdict; 1 when the claim is refuted."""
    from bench.audit import AuditConfig, audit_mechanism
    from bench.audit.config import MAX_IMAGE_SIZE, MAX_TRIALS, MIN_IMAGE_SIZE, MIN_TRIALS
    from bench.audit.run import AUTO_MAX_TRIALS, gate_trials
    from bench.cell.estimate import check_bound, describe
    from bench.cell.estimate_audit import estimate_audit
    from bench.core.params import parse_assignments
    from bench.core.registry import load_mechanism_file, mechanisms
    from bench.system.devices import resolve_device
    from bench.system.progress import Display, interactive

    auto = args.trials.strip().lower() == "auto"
    config = AuditConfig(
        trials=MIN_TRIALS if auto else _integer("--trials", args.trials, MIN_TRIALS, MAX_TRIALS),
        confidence=_confidence(args.confidence),
        seed=_integer("--seed", args.seed, 0),
        device=str(resolve_device(args.device)),
        image_size=_integer("--image-size", args.image_size, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE),
    ).validate()
    if args.mechanism_file is not None:
        load_mechanism_file(args.mechanism_file)
    mechanism = mechanisms.get(args.mechanism)(**parse_assignments(args.param))
    if auto:
        config = dataclasses.replace(config, trials=gate_trials(mechanism, config.confidence, AUTO_MAX_TRIALS))
    expected = estimate_audit(mechanism, config, given=not auto)
    if expected is not None:
        check_bound(expected, args.allow_long, "this audit")
        if not args.quiet:
            print(f"[bench] audit {args.mechanism}: {config.trials:,} trials per input expected to take "
                  f"{describe(expected)}", file=sys.stderr, flush=True)
    with Display(interactive=interactive() and not args.quiet, lines=not args.quiet) as display:
        emitter = display.emitter()
        emitter.start(f"audit {args.mechanism}")
        report = audit_mechanism(mechanism, config, emitter.progress)
    print(json.dumps(report.to_dict(), indent=2, default=_jsonable) if args.json else report.format())
    return 1 if report.verdict == "failed" else 0


def _jsonable(value: Any) -> Any:
    return str(value)
