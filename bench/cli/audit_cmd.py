"""``bench audit``: an empirical DP audit of a mechanism's formal claim."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from bench.errors import BenchError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench audit``."""
    p = subparsers.add_parser(
        "audit", help="audit a mechanism's formal claim empirically (Clopper-Pearson lower bound on epsilon)",
        description="Releases two neighbouring inputs (chosen by the claim's unit) N times each, chooses a "
                    "distinguishing test on min(N, 20000) other trials, and turns its error counts into a lower "
                    "bound on epsilon. Exit 0 when the bound does not exceed the claim (or there is no claim), 1 "
                    "when it does, 2 on a usage error.",
    )
    p.add_argument("--mechanism", required=True, help="registered mechanism name (bench list mechanisms)")
    p.add_argument("--param", action="append", metavar="K=V", help="mechanism parameter (repeatable)")
    p.add_argument("--trials", default="10000", help="counted trials per input, an integer >= 100 (default 10000)")
    p.add_argument("--seed", default="0", help="base seed of the trials (default 0)")
    p.add_argument("--confidence", default="0.95", help="confidence of the lower bound (default 0.95)")
    p.add_argument("--image-size", default="16", help="side of the square audit images (default 16)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--mechanism-file", type=Path, default=None, help="a Python file that registers a mechanism")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=audit)


def _integer(option: str, text: str, low: int, high: int | None = None) -> int:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and low <= value <= (math.inf if high is None else high)):
        bounds = f">= {low}" if high is None else f"in [{low}, {high:,}]"
        raise BenchError(f"{option} must be an integer {bounds}, got {text!r}")
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
    """Validates everything, audits the claim, prints the report; 1 when the claim is exceeded."""
    from bench.audit import AuditConfig, audit_mechanism
    from bench.audit.config import MAX_IMAGE_SIZE, MAX_TRIALS, MIN_IMAGE_SIZE, MIN_TRIALS
    from bench.params import parse_assignments
    from bench.registry import load_file, mechanisms
    from bench.runner import resolve_device

    config = AuditConfig(
        trials=_integer("--trials", args.trials, MIN_TRIALS, MAX_TRIALS),
        confidence=_confidence(args.confidence),
        seed=_integer("--seed", args.seed, 0),
        device=str(resolve_device(args.device)),
        image_size=_integer("--image-size", args.image_size, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE),
    ).validate()
    if args.mechanism_file is not None:
        load_file(args.mechanism_file)
    mechanism = mechanisms.get(args.mechanism)(**parse_assignments(args.param))
    report = audit_mechanism(mechanism, config)
    print(json.dumps(report.to_dict(), indent=2, default=_jsonable) if args.json else report.format())
    return 0 if report.passed else 1


def _jsonable(value: Any) -> Any:
    return str(value)
