"""Test helpers for plugin authors: the conformance suites of the registered plugins."""

from bench.testing.mechanisms import (
    CHECKS,
    ConformanceError,
    NoiseProbe,
    noise_probe_for,
    register_audit_params,
    register_noise_probe,
    run_conformance,
    synthetic_boxes,
)

__all__ = [
    "CHECKS",
    "ConformanceError",
    "NoiseProbe",
    "noise_probe_for",
    "register_audit_params",
    "register_noise_probe",
    "run_conformance",
    "synthetic_boxes",
]
