"""MLflow tracking: the one door to MLflow. One run per cell, RUNNING while it computes.

A cell's run is created RUNNING when its computation starts and marked FINISHED only once
everything is logged; a failure marks it FAILED (KILLED on an interrupt) with its error.
Only FINISHED runs that nothing supersedes count as done cells, so an interrupted cell is
recomputed and never half-reported. The store is probed when a :class:`Tracker` opens, so
a bad URI or an unreadable database fails in one line before any computation.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from bench.core.result import Result
from bench.errors import BenchError
from bench.storage.locks import file_lock
from bench.storage.tracking import blank
from bench.storage.tracking.health import (
    NoResults,
    StoreDamaged,
    StoreLocked,
    check_database,
    guard,
    store_problem,
    store_timeout,
    write_marker,
)
from bench.storage.tracking.metrics import flatten, metric_batches, result_metrics
from bench.storage.tracking.naming import OLD_PARAM, PARAM, run_name, run_params  # noqa: F401  (re-exported)
from bench.storage.tracking.relocate import check_moved
from bench.storage.tracking.tables import log_tables
from bench.storage.tracking.tags import EXPERIMENT, SUPERSEDED, TAG, counts_as_result  # noqa: F401  (re-exported)
from bench.storage.tracking.uri import check_tracking_uri, tracking_uri  # noqa: F401  (re-exported)
from bench.storage.tracking.verify import LOST, RESULT_DIGEST, UnverifiedResult, check_result, result_digest
from bench.system import precision

PROBE_TIMEOUT_S = "3"


EXPERIMENT_KIND = "mlflow.experimentKind"
CLASSIC_VIEW = "custom_model_development"
"""The experiment kind that makes MLflow 3's UI open the classic ML view (runs, metrics), not the GenAI one."""


def system_tags() -> dict[str, str]:
    """Returns the tags MLflow's own logging sets (source name and type, user), which the client API does not."""
    import getpass

    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return {"mlflow.source.name": "bench", "mlflow.source.type": "LOCAL", "mlflow.user": user}


def _import_mlflow() -> None:
    """Imports MLflow (about a second) and quietens the loggers it configures on import.

    Only a store that is opened needs it: a command that finds no store (``bench
    leaderboard show`` on a fresh clone) never imports it.
    """
    import logging

    import mlflow  # noqa: F401  (it configures its loggers on import: quieten them after)

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # It logs a locked or damaged database with a traceback; health.guard says it in one line.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def _param_key(name: str) -> str:
    """Returns ``name`` with characters MLflow refuses in a key replaced by ``_``."""
    return "".join(ch if ch.isalnum() or ch in "_-. /" else "_" for ch in name)[:250]


class Tracker:
    """Logs cells to MLflow and finds them again.

    Args:
        results_dir: Where the default sqlite database and artifacts live.
        uri: Tracking URI overriding the default.
        create: Whether a missing sqlite database may be created (False for read-only commands).

    Raises:
        BenchError: The store cannot be opened (bad URI, unreachable server, unreadable or
            foreign database, results directory that is a file), or ``create`` is False and
            the default database does not exist.
    """

    def __init__(self, results_dir: Path, uri: str | None = None, create: bool = True):
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        self.results_dir = Path(results_dir)
        self.uri = tracking_uri(self.results_dir, uri)
        self._experiment_id: str | None = None
        if not self.uri.startswith("sqlite:///"):
            self.client = self._open(probe=True)
            return
        if self.results_dir.exists() and not self.results_dir.is_dir():
            raise BenchError(f"results directory {self.results_dir} is a file, not a directory")
        database = Path(self.uri[len("sqlite:///"):])
        if not create and not database.exists():
            raise NoResults(f"no results database at {database} (run 'bench run' first or pass --results-dir)")
        if database.exists() and not database.is_file():
            raise BenchError(f"tracking database {database} is not a file")
        if create and database.exists() and not os.access(database, os.W_OK):
            raise BenchError(f"tracking database {database} is read-only: new runs cannot be logged to it")
        empty = database.exists() and check_database(database, self.results_dir)
        if empty and not create:
            raise NoResults(f"no results database at {database} (the file is empty; run 'bench run' first)")
        try:
            database.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BenchError(f"cannot create the results directory {database.parent}: {exc.strerror or exc}") from None
        if database.exists() and not empty:  # open and probe it without writing anything
            self.client = self._open(probe=False)
            if database.resolve() == (self.results_dir / "mlflow.db").resolve():
                check_moved(self.results_dir, writing=create)
            if create:
                write_marker(database)
            return
        # Processes starting together on one results directory would otherwise race to
        # create MLflow's sqlite schema and the experiment.
        with file_lock(database.parent / ".bench-init.lock"):
            copied = blank.restore(database)
            self.client = self._open(probe=False)
            if not copied:
                blank.remember(database)
            _ = self.experiment_id
            write_marker(database)

    def _open(self, probe: bool) -> Any:
        """Opens the client and touches the store once; any failure is one BenchError line."""
        _import_mlflow()
        from mlflow.tracking import MlflowClient

        overrides = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": PROBE_TIMEOUT_S} if probe else {}
        with _environment(overrides):
            try:
                client = guard(MlflowClient(tracking_uri=self.uri), self.uri)
                found = client.get_experiment_by_name(EXPERIMENT)
                self._experiment_id = found.experiment_id if found is not None else None
            except BenchError:
                raise
            except Exception as exc:  # MLflow, SQLAlchemy, requests and OS errors all land here
                if store_problem(exc) == "damaged":
                    raise StoreDamaged(self.uri, _first_line(exc)) from None
                if store_problem(exc) == "locked":
                    raise StoreLocked(self.uri, store_timeout()) from None
                raise BenchError(f"cannot open the tracking store {self.uri}: {_first_line(exc)}") from None
        return client

    @property
    def experiment_id(self) -> str:
        """The id of the ``privbench`` experiment, created on first use."""
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(EXPERIMENT)
            if found is not None:
                self._experiment_id = found.experiment_id
            else:
                from mlflow.exceptions import MlflowException

                location = None
                if self.uri.startswith("sqlite:///"):
                    location = (self.results_dir.resolve() / "artifacts").as_uri()
                try:
                    self._experiment_id = self.client.create_experiment(EXPERIMENT, artifact_location=location,
                                                                        tags={EXPERIMENT_KIND: CLASSIC_VIEW})
                except MlflowException:  # another process created it first
                    self._experiment_id = self.client.get_experiment_by_name(EXPERIMENT).experiment_id
        return self._experiment_id

    # --- one cell's run ---------------------------------------------------------------------

    def start_cell(self, cell_key: str, identity: Mapping[str, Any], lock: Path | None = None) -> str:
        """Creates a cell's run, RUNNING from now; returns its id.

        Args:
            cell_key: The cell's content key.
            identity: task, mechanism, params, seed and profile of the cell, and its
                precision (fp32 when absent).
            lock: The cell lock its process holds (lets a later process recognise an orphan).
        """
        from mlflow.entities import Param

        tags = {f"{TAG}cell_key": cell_key, f"{TAG}host": socket.gethostname(), f"{TAG}pid": str(os.getpid()),
                **system_tags()}
        if lock is not None:
            tags[f"{TAG}lock"] = str(Path(lock).resolve())
        for name in ("task", "mechanism", "seed", "profile"):
            tags[f"{TAG}{name}"] = str(identity[name])
        mixed = identity.get("precision", precision.DEFAULT)
        name = run_name(identity["task"], identity["mechanism"], identity.get("params", {}), identity["seed"], mixed)
        run = self.client.create_run(self.experiment_id, run_name=name[:250], tags=tags)
        params = {"task": identity["task"], "mechanism": identity["mechanism"], "seed": identity["seed"],
                  "profile": identity["profile"], "precision": mixed, **flatten(PARAM, identity.get("params", {}))}
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        return run.info.run_id

    def finish_cell(self, run_id: str, result: Result, configs: Mapping[str, Any], artifacts: Mapping[str, bytes],
                    curves: Mapping[str, Sequence[float]] | None = None) -> None:
        """Logs a computed cell's metrics, tags, tables and artifacts, then marks its run FINISHED.

        The scalar metrics are the numbers compared across runs (:func:`result_metrics`);
        groups and every attack metric are table artifacts (:mod:`bench.storage.tracking.tables`).
        ``curves`` (``model.name -> value per epoch``, :mod:`bench.core.curves`) become step
        metrics ``curve.<model>.<name>`` at step = epoch.
        """
        from mlflow.entities import RunTag

        blob = result.to_json().encode()
        tags = {**self._tags(result), RESULT_DIGEST: result_digest(blob)}
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])
        for batch in metric_batches(result_metrics(result), curves, _millis()):
            self.client.log_batch(run_id, metrics=batch)
        self._log_settings(run_id, configs)
        self._log_dataset(run_id, result)
        log_tables(self.client, run_id, result)
        with tempfile.TemporaryDirectory() as tmp:
            files = {"result.json": blob,
                     "config.json": json.dumps(configs, indent=2, default=str).encode()}
            files.update(artifacts)
            for filename, content in files.items():
                Path(tmp, filename).write_bytes(content)
            self.client.log_artifacts(run_id, tmp)
        self.client.set_terminated(run_id, "FINISHED")

    def _log_dataset(self, run_id: str, result: Result) -> None:
        """Logs the cell's data as an MLflow dataset input: its name, content fingerprint and kind."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        source = json.dumps({"dataset": result.dataset, "synthetic": result.synthetic, "fingerprint": result.dataset_fingerprint,
                             "images": result.images.get("stored") if result.images else None})
        dataset = Dataset(name=result.dataset, digest=result.dataset_fingerprint[:36] or "unknown",
                          source_type="synthetic" if result.synthetic else "local", source=source)
        context = InputTag("mlflow.data.context", result.eval_split)
        with contextlib.suppress(Exception):  # an older server without dataset inputs still gets the run
            self.client.log_inputs(run_id, datasets=[DatasetInput(dataset, tags=[context])])

    def _log_settings(self, run_id: str, configs: Mapping[str, Any]) -> None:
        """Logs the resolved task and attack settings as params (``task.schedule.epochs``, ``attack.face_reid.epochs``)."""
        from mlflow.entities import Param

        settings = flatten("task.", dict(configs.get("task") or {}))
        for attack, values in dict(configs.get("attacks") or {}).items():
            settings.update(flatten(f"attack.{attack}.", dict(values or {})))
        params = [Param(_param_key(k), (json.dumps(v, default=str) if isinstance(v, (list, tuple)) else str(v))[:6000])
                  for k, v in settings.items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
            self.client.log_batch(run_id, params=params[start:start + 100])

    def fail_cell(self, run_id: str, error: str, trace: str = "", status: str = "FAILED") -> None:
        """Marks a cell's run FAILED (or KILLED) with its one-line error and traceback."""
        try:
            self.client.set_tag(run_id, f"{TAG}error", error[:4000])
            if trace:
                self.client.log_text(run_id, trace, "error.txt")
        except (StoreLocked, StoreDamaged):
            raise  # the run cannot be marked either: say why once
        except Exception:
            pass
        self.client.set_terminated(run_id, status)

    def log_cell(self, result: Result, configs: Mapping[str, Any], artifacts: Mapping[str, bytes]) -> str:
        """Logs an already computed result as one FINISHED run (for imports and tests); returns its id."""
        identity = {"task": result.task, "mechanism": result.mechanism, "params": result.params,
                    "seed": result.seed, "profile": result.profile, "precision": precision.recorded(result.versions)}
        run_id = self.start_cell(result.cell_key, identity)
        try:
            self.finish_cell(run_id, result, configs, artifacts)
        except BaseException:
            self.fail_cell(run_id, "logging failed")
            raise
        return run_id

    def _tags(self, result: Result) -> dict[str, Any]:
        tags = {
            "task": result.task, "dataset": result.dataset, "mechanism": result.mechanism,
            "mechanism_version": result.mechanism_version, "profile": result.profile, "seed": result.seed,
            "git_sha": result.git_sha, "dataset_fingerprint": result.dataset_fingerprint,
            "synthetic": result.synthetic, "device": result.device, "schema": result.schema,
            "eval_split": result.eval_split, "primary_metric": result.primary_metric,
            "claim": json.dumps(result.claim) if result.claim else "none",
            "training_claim": json.dumps(result.training_claim) if result.training_claim else "none",
            "training_claim_status": training_status(result.training_claim),
            "privacy_flags": json.dumps(result.privacy_flags, sort_keys=True) if result.privacy_flags else "none",
            "skipped_attacks": json.dumps(result.skipped_attacks, sort_keys=True) if result.skipped_attacks else "none",
        }
        tags.update(flatten("version.", result.versions))
        out = {f"{TAG}{k}": v for k, v in tags.items()}
        if result.git_sha != "unknown":
            out["mlflow.source.git.commit"] = result.git_sha.removesuffix("-dirty")
        return out

    # --- finding cells ----------------------------------------------------------------------

    def runs_of(self, cell_key: str, status: str) -> list[Any]:
        """Returns the runs of a cell with one status.

        FINISHED runs that a forced re-run superseded, or that hold a result of another
        schema, are left out: they are not the cell's result.
        """
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{TAG}cell_key` = '{cell_key}' and attributes.status = '{status}'",
        )
        if status == "FINISHED":
            return [r for r in runs if counts_as_result(r)]
        return list(runs)

    def finished_runs(self, cell_key: str) -> list[str]:
        """Returns the ids of the FINISHED runs of a cell that no re-run supersedes."""
        return [r.info.run_id for r in self.runs_of(cell_key, "FINISHED")]

    def supersede(self, old_ids: list[str], new_id: str) -> None:
        """Tags earlier FINISHED runs of a cell as superseded by a re-run (forced, or on changed data)."""
        for run_id in old_ids:
            self.client.set_tag(run_id, SUPERSEDED, new_id)

    def fail_orphans(self, cell_key: str, lock_free: Any) -> int:
        """Marks RUNNING runs of a cell whose process died as FAILED; returns how many.

        Args:
            cell_key: The cell.
            lock_free: Callable(run) -> whether the lock its process held is free now (then
                the process is gone: a live process holds its cell lock until it ends).
        """
        count = 0
        for run in self.runs_of(cell_key, "RUNNING"):
            if lock_free(run):
                self.fail_cell(run.info.run_id, "orphaned: its process died (killed?) before the cell finished")
                count += 1
        return count

    def find_run(self, ref: str) -> str:
        """Returns the run id for a run id or a cell key (its current FINISHED run), or a unique prefix of one.

        Raises:
            BenchError: Neither a run nor a finished cell, or a prefix of several (listed).
        """
        from mlflow.exceptions import MlflowException

        from bench.storage.tracking.lookup import resolve

        with contextlib.suppress(MlflowException):
            return self.client.get_run(ref).info.run_id
        if all(c in "0123456789abcdef" for c in ref) and ref:
            finished = self.finished_runs(ref)
            if finished:
                return finished[0]
        return resolve(self, ref)

    def load_result(self, run_id: str) -> Result:
        """Returns the result logged by a run, once its bytes match the digest the run logged.

        Raises:
            UnverifiedResult: result.json differs from its digest, or the run has none.
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
                if RESULT_DIGEST in run.data.tags:  # it logged one: its artifacts were deleted since
                    raise UnverifiedResult(f"run {run_id}'s result.json is missing (its artifacts were deleted "
                                           "after the run ended)", LOST) from None
                raise BenchError(f"run {run_id!r} has no result.json: not a PrivBench cell") from None
            data = Path(path).read_bytes()
            check_result(run, data)
            try:
                return Result.from_dict(json.loads(data))
            except ValueError as exc:
                raise BenchError(f"run {run_id!r}: {exc}") from None


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return f"{type(exc).__name__}: {line[:300]}"


def _millis() -> int:
    return int(time.time() * 1000)


def training_status(claim: Mapping[str, Any] | None) -> str:
    """Returns ``none``, ``backed`` or ``unbacked`` for a training claim (an MLflow tag to filter on)."""
    if not claim:
        return "none"
    return "backed" if claim.get("backed", True) else "unbacked"
