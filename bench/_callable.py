"""Lets ``bench.grid(...)`` and ``bench.tune(...)`` be the Python API while ``bench.grid`` and ``bench.tune`` are modules.

Importing a submodule sets it as an attribute of its package, so once ``bench/grid.py`` is
imported (every cell imports it) ``bench.grid`` is that module. Its class is made callable:
calling it calls the API function of that name (:mod:`bench.api_sweeps`); everything else
(``from bench.grid import expand``, ``import bench.grid as g``) is the module as before.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    """A module that, called, runs ``bench.api.<its api name>``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from bench import api

        return getattr(api, self.__dict__["_api_name"])(*args, **kwargs)


def callable_module(module_name: str, api_name: str) -> None:
    """Makes the module ``module_name`` callable as ``bench.api.<api_name>``."""
    module = sys.modules[module_name]
    module._api_name = api_name  # type: ignore[attr-defined]
    module.__class__ = _CallableModule
