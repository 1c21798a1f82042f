"""What runs inside the sandbox of :mod:`bench.testing.isolation`: a mechanism file loaded, checked and applied.

``python -m bench.testing.isolation_probe SPEC.json`` imports the mechanism files the spec
names, runs the conformance checks (all but the audit) at the suite's sizes and at each
benchmark's (:mod:`bench.testing.sized`), releases one batch of each benchmark's clean
images through the guarded path, and prints one JSON line: ``{"failures": [...]}``.
It is not a module to import: it is the sandboxed process's main program.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from bench.core.registry import load_mechanism_file, mechanisms
from bench.data.base import ImageSet
from bench.randomness.streams import Streams
from bench.release import guard
from bench.testing._mechanism_cases import fitted_mechanism
from bench.testing.mechanisms import CHECKS, run_conformance
from bench.testing.sized import SizedTarget, sized_conformance

PROBE_CHECKS = tuple(c for c in CHECKS if c != "audit")
"""The conformance checks the sandbox runs (the audit is long and runs outside, after)."""


def probe(spec: dict) -> list[str]:
    """Runs the sandboxed checks of a spec; returns one line per failure."""
    for path in spec["files"]:
        load_mechanism_file(path)
    name = spec["mechanism"]
    failures = run_conformance(name, checks=list(PROBE_CHECKS), device="cpu")
    for raw in spec["targets"]:
        target = SizedTarget(**raw["target"])
        failures += sized_conformance(name, None, target, "cpu")
        images = torch.load(raw["images"], weights_only=True)
        public = ImageSet(images=images, labels=torch.zeros(len(images), dtype=torch.int64))
        for params in spec.get("params") or [None]:
            mechanism = fitted_mechanism(mechanisms.get(name), params, public, torch.device("cpu"))
            streams = Streams.for_images(int(spec.get("seed", 0)), "gate/sandbox", len(images))
            guard.apply(mechanism, images, generator=streams, device="cpu")
    return failures


def main(argv: list[str]) -> int:
    """Reads the spec, runs :func:`probe` and prints its JSON line; exit status 0 unless the probe crashed."""
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    try:
        failures = probe(spec)
    except Exception as exc:  # noqa: BLE001 (the mechanism crashed in the sandbox (a refused write, a missing file, ...))
        print(json.dumps({"failures": [f"crashed with {type(exc).__name__}: {' '.join(str(exc).split())}"]}))
        return 0
    print(json.dumps({"failures": failures}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
