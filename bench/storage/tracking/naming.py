"""How runs are named in MLflow: the run name, and the prefix of a mechanism parameter."""

from __future__ import annotations

from typing import Any, Mapping

from bench.system import precision

PARAM = "param."
"""The prefix of a mechanism parameter, in MLflow's params as in ``bench.results()``'s columns."""
OLD_PARAM = "mech."
"""The prefix runs logged before one naming used in MLflow (still read: :func:`run_params`)."""


def run_name(task: str, mechanism: str, params: Mapping[str, Any], seed: int, mixed: str = precision.DEFAULT) -> str:
    """Returns a run's name: ``mechanism(k=v, ...) · s<seed> · task``, then `` · bf16`` for a mixed-precision cell.

    What differs between the runs of a sweep comes first, where MLflow's run-name column
    still shows it.
    """
    shown = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{mechanism}({shown}) · s{seed} · {task}" + ("" if mixed == precision.DEFAULT else f" · {mixed}")


def run_params(run: Any) -> dict[str, str]:
    """Returns a run's mechanism parameters (name -> logged text), as ``param.*`` or, in older runs, ``mech.*``."""
    params = run.data.params
    old = {k[len(OLD_PARAM):]: v for k, v in params.items() if k.startswith(OLD_PARAM)}
    return {**old, **{k[len(PARAM):]: v for k, v in params.items() if k.startswith(PARAM)}}
