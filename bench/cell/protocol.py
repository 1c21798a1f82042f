"""The protocol key: a cell's resolved task and attack settings, and the versions of the code behind its numbers."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from bench.core.keys import content_key
from bench.core.registry import datasets
from bench.randomness import rng
from bench.release import dataset as release
from bench.release import facecrops


def protocol_key(task: Any, attacks: Mapping[str, Any], leave_out: Iterable[str] = ()) -> str:
    """Returns the content key of a cell's resolved task and attack settings (presets and overrides).

    Part of the cell key and of the board key: a preset that changes between releases (a
    profile's epochs, an adversary's training) or code whose numbers change
    (:func:`code_versions`) makes new cells and new boards, so a result computed under the
    old settings is neither returned for nor ranked beside the new ones.

    Args:
        task: The cell's :class:`~bench.core.interfaces.Task`.
        attacks: Attack name -> the cell's :class:`~bench.core.interfaces.Attack`.
        leave_out: Dotted task settings left out: the board's key leaves out the task's
            ``entry_settings``, which make rows of one board (dp_vit's ``training``).
    """
    return content_key("protocol", type(task).name, _without(task.config_dict(), leave_out),
                       {name: attack.config_dict() for name, attack in sorted(attacks.items())},
                       code_versions(task, attacks))


def code_versions(task: Any, attacks: Mapping[str, Any]) -> dict[str, Any]:
    """Returns the versions of the code behind a cell's numbers, which its settings do not show.

    The task's, its dataset's and each attack's ``version`` (bumped when their numbers
    change), and those of the maps every cell goes through: the random streams
    (:data:`bench.randomness.rng.VERSION`), the release format and the face crops adversaries see (where
    they see some: :func:`bench.release.facecrops.keyed_version`). Part
    of :func:`protocol_key`: a cell computed by older code is neither returned for nor ranked
    beside one that the code of today would compute differently.
    """
    dataset = datasets.get(task.dataset) if task.dataset in datasets else None
    return {"task": type(task).version, "dataset": getattr(dataset, "version", None),
            "attacks": {name: type(attack).version for name, attack in sorted(attacks.items())},
            "rng": rng.VERSION, "release": release.RELEASE_FORMAT,
            "face_view": facecrops.keyed_version(bool(set(attacks) & face_crop_attacks(type(task))))}


def face_crop_attacks(task_cls: type) -> frozenset[str]:
    """Returns the adversaries that the task's benchmark has attack face crops (:mod:`bench.release.facecrops`)."""
    return frozenset(getattr(getattr(task_cls, "benchmark", None), "face_crops", ()) or ())


def _without(values: Mapping[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    out = dict(values)
    for path in paths:
        head, _, rest = path.partition(".")
        if head in out and not rest:
            del out[head]
        elif head in out and isinstance(out[head], Mapping):
            out[head] = _without(out[head], [rest])
    return out
