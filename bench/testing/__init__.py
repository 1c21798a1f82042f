"""Test helpers for plugin authors: the conformance suites of the registered plugins."""

from bench.testing.components import ATTACK_CHECKS, TASK_CHECKS, check_attack, check_task
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
    "ATTACK_CHECKS",
    "CHECKS",
    "ConformanceError",
    "NoiseProbe",
    "noise_probe_for",
    "register_audit_params",
    "register_noise_probe",
    "run_conformance",
    "TASK_CHECKS",
    "check_attack",
    "check_task",
    "synthetic_boxes",
]
