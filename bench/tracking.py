"""MLflow tracking: one run per cell, marked FINISHED only once everything is logged.

A run that dies half-way stays RUNNING or is marked FAILED; only FINISHED runs count as
done cells, so an interrupted cell is recomputed and never half-reported.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from bench.errors import BenchError
from bench.locks import file_lock
from bench.interfaces import Result

EXPERIMENT = "privbench"
TAG = "bench."


def tracking_uri(results_dir: Path, explicit: str | None = None) -> str:
    """Returns the tracking URI: ``explicit``, else $MLFLOW_TRACKING_URI, else sqlite in results_dir."""
    if explicit:
        return explicit
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


def flatten(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Returns ``{prefix + key: value}`` with nested mappings joined by dots."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(flatten(f"{prefix}{key}.", value))
        else:
            out[f"{prefix}{key}"] = value
    return out


class Tracker:
    """Logs results to MLflow and finds them again.

    Args:
        results_dir: Where the default sqlite database and artifacts live.
        uri: Tracking URI overriding the default.
        create: Whether a missing sqlite database may be created (False for read-only commands).

    Raises:
        BenchError: ``create`` is False and the default database does not exist.
    """

    def __init__(self, results_dir: Path, uri: str | None = None, create: bool = True):
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        import logging

        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)

        self.results_dir = Path(results_dir)
        self.uri = tracking_uri(self.results_dir, uri)
        self._experiment_id: str | None = None
        if not self.uri.startswith("sqlite:///"):
            self.client = MlflowClient(tracking_uri=self.uri)
            return
        database = Path(self.uri[len("sqlite:///"):])
        if not create and not database.exists():
            raise BenchError(f"no results database at {database} (run 'bench run' first or pass --results-dir)")
        database.parent.mkdir(parents=True, exist_ok=True)
        # Processes starting together on one results directory would otherwise race to
        # create MLflow's sqlite schema and the experiment.
        with file_lock(database.parent / ".bench-init.lock"):
            self.client = MlflowClient(tracking_uri=self.uri)
            _ = self.experiment_id

    @property
    def experiment_id(self) -> str:
        """The id of the ``privbench`` experiment, created on first use."""
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(EXPERIMENT)
            if found is not None:
                self._experiment_id = found.experiment_id
            else:
                location = None
                if self.uri.startswith("sqlite:///"):
                    location = (self.results_dir.resolve() / "artifacts").as_uri()
                self._experiment_id = self.client.create_experiment(EXPERIMENT, artifact_location=location)
        return self._experiment_id

    def log_cell(self, result: Result, configs: Mapping[str, Any], artifacts: Mapping[str, bytes]) -> str:
        """Logs one cell as one run and returns its run id.

        Args:
            result: The cell's result.
            configs: Resolved configurations (task, attacks), logged as config.json.
            artifacts: Extra files to attach: name -> content.
        """
        from mlflow.entities import Metric, Param, RunTag

        name = f"{result.task}/{result.mechanism}" + "".join(f"/{k}={v}" for k, v in result.params.items())
        run = self.client.create_run(self.experiment_id, run_name=name[:250], tags={f"{TAG}cell_key": result.cell_key})
        run_id = run.info.run_id
        try:
            params = {"task": result.task, "mechanism": result.mechanism, "seed": result.seed, "profile": result.profile}
            params.update(flatten("mech.", result.params))
            metrics = flatten("utility.", result.utility)
            for attack, values in result.attacks.items():
                metrics.update(flatten(f"attack.{attack}.", values))
            metrics.update(flatten("privacy.", result.privacy))
            metrics.update(flatten("release.", result.release_metrics))
            if result.privacy_score is not None:
                metrics["privacy_score"] = result.privacy_score
            metrics["runtime_s"] = result.runtime_s
            tags = self._tags(result)
            stamp = _millis()
            self.client.log_batch(
                run_id,
                metrics=[Metric(k, float(v), stamp, 0) for k, v in metrics.items() if _is_number(v)],
                params=[Param(k, str(v)) for k, v in params.items()],
                tags=[RunTag(k, str(v)) for k, v in tags.items()],
            )
            with tempfile.TemporaryDirectory() as tmp:
                files = {"result.json": result.to_json().encode(), "config.json": json.dumps(configs, indent=2, default=str).encode()}
                files.update(artifacts)
                for filename, content in files.items():
                    Path(tmp, filename).write_bytes(content)
                self.client.log_artifacts(run_id, tmp)
        except BaseException:
            self.client.set_terminated(run_id, "FAILED")
            raise
        self.client.set_terminated(run_id, "FINISHED")
        return run_id

    def _tags(self, result: Result) -> dict[str, Any]:
        tags = {
            "task": result.task, "dataset": result.dataset, "mechanism": result.mechanism,
            "mechanism_version": result.mechanism_version, "profile": result.profile, "seed": result.seed,
            "git_sha": result.git_sha, "dataset_fingerprint": result.dataset_fingerprint,
            "synthetic": result.synthetic, "device": result.device, "schema": result.schema,
            "claim": json.dumps(result.claim) if result.claim else "none",
        }
        tags.update(flatten("version.", result.versions))
        return {f"{TAG}{k}": v for k, v in tags.items()}

    def finished_runs(self, cell_key: str) -> list[str]:
        """Returns the ids of FINISHED runs of a cell."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{TAG}cell_key` = '{cell_key}' and attributes.status = 'FINISHED'",
        )
        return [r.info.run_id for r in runs]

    def load_result(self, run_id: str) -> Result:
        """Returns the result logged by a run.

        Raises:
            BenchError: No such run, or it has no result (not a PrivBench cell, or unfinished).
        """
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            raise BenchError(f"no run {run_id!r} in {self.uri}") from None
        if run.info.status != "FINISHED":
            raise BenchError(f"run {run_id!r} is {run.info.status}, it has no complete result")
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = self.client.download_artifacts(run_id, "result.json", tmp)
            except (MlflowException, OSError):
                raise BenchError(f"run {run_id!r} has no result.json: not a PrivBench cell") from None
            return Result.from_dict(json.loads(Path(path).read_text()))


def _millis() -> int:
    import time

    return int(time.time() * 1000)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
