"""Where the tracking store is: the URI a results directory or a user names, checked before anything is written."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from bench.errors import BenchError


def tracking_uri(results_dir: Path, explicit: str | None = None) -> str:
    """Returns the tracking URI: ``explicit``, else $MLFLOW_TRACKING_URI, else sqlite in results_dir.

    Raises:
        BenchError: A given sqlite URI that :func:`check_tracking_uri` refuses, or a results
            directory whose name is empty or over 255 bytes.
    """
    if explicit:
        return check_tracking_uri(explicit, results_dir, "--tracking-uri")
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return check_tracking_uri(os.environ["MLFLOW_TRACKING_URI"], results_dir, "$MLFLOW_TRACKING_URI")
    from bench.storage.folders import check_path_name

    check_path_name("--results-dir", results_dir)
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


def check_tracking_uri(uri: str, results_dir: Path, flag: str = "--tracking-uri") -> str:
    """Checks a given sqlite tracking URI before anything is written; returns it unchanged.

    An in-memory database would lose every run at exit (and MLflow would put the
    artifacts in ./mlruns); a database in a folder that does not exist would have that
    folder created wherever the URI points, so it must exist (the results directory,
    which is created, excepted). Other schemes are probed when the store opens.

    Raises:
        BenchError: An in-memory sqlite URI, a database that is a folder, a name over 255
            bytes, a database in a missing folder, or a scheme MLflow has no store for.
    """
    from bench.storage.folders import check_path_name

    if not uri.startswith("sqlite:"):
        scheme = urlparse(uri).scheme.split("+")[0].lower()
        if len(scheme) > 1 and scheme not in tracking_schemes():  # one letter: a Windows drive, a path
            raise BenchError(f"{flag} {uri}: unsupported scheme {scheme!r}; give sqlite:///PATH/mlflow.db, "
                             "http(s)://HOST:PORT (a tracking server), postgresql://..., mysql://... or file:PATH")
        return uri
    path, _, query = uri[len("sqlite:///"):].partition("?") if uri.startswith("sqlite:///") else ("", "", "")
    if path in ("", ":memory:") or "mode=memory" in query:
        raise BenchError(f"{flag} {uri} keeps the tracking store in memory: every run would be lost at exit; "
                         "give sqlite:///PATH/mlflow.db or leave it out (sqlite in --results-dir)")
    check_path_name(flag, path)
    database = Path(path)
    if database.is_dir():
        raise BenchError(f"{flag} {uri}: {database} is a folder; name the database file in it")
    folder = database.resolve().parent
    if not folder.is_dir() and folder != Path(results_dir).resolve():
        raise BenchError(f"{flag} {uri}: no folder {folder} for the database (create it first; only --results-dir "
                         "is created for you)")
    return uri


MLFLOW_SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks", "databricks-uc", "uc")
"""The URI schemes MLflow opens a tracking store for (``mlflow.tracking._tracking_service.utils``)."""


def tracking_schemes() -> set[str]:
    """Returns the schemes a tracking URI may have: MLflow's own and those of installed store plugins."""
    from importlib.metadata import entry_points

    return {*MLFLOW_SCHEMES, *(point.name for point in entry_points(group="mlflow.tracking_store"))}
