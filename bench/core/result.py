"""A cell's outcome: the frozen, serialisable row every result store reads and writes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

__all__ = ["RESULT_SCHEMA", "Result"]


RESULT_SCHEMA = 2
"""2: privacy scores are None when the attack is too weak (1 scored them 1.0)."""


@dataclass(frozen=True)
class Result:
    """One cell's outcome: a frozen, serialisable row.

    Attributes:
        cell_key: Content key of the cell (task, mechanism, version, params, seed, profile, overrides, protocol).
        task: Registered task name (the benchmark).
        dataset: Dataset name.
        mechanism: Registered mechanism name.
        mechanism_version: The mechanism's version.
        params: Resolved mechanism parameters.
        seed: Base seed.
        profile: Profile name.
        utility: Task metrics.
        primary_metric: Name of the task's primary metric.
        attacks: Attack name -> its raw metrics.
        privacy: Attack name -> privacy score; None when the attack is too weak to measure
            protection (its clean advantage over chance is not significant).
        privacy_score: Worst (lowest) defined privacy score over the attacks (the strongest
            known attack); None without attacks or when every attack is too weak.
        privacy_score_se: Standard error of ``privacy_score``: that of the attack (or attack
            part) that sets it (:meth:`bench.core.outcomes.AttackOutcome.privacy_se`); each attack's
            own is ``attacks[name]["privacy_se"]``. None where unknown, and in results written
            before it was recorded.
        claim: The mechanism's formal claim as a dict, or None.
        training_claim: The task's training claim (DP-SGD's, for its training records) as a
            dict, or None; never merged with ``claim``.
        release_metrics: Facts measured while releasing (MTCNN recall against the dataset's boxes).
        privacy_flags: ``attack`` or ``attack.target`` -> why its score is undefined
            (``attack too weak``), or why a defined one is coarse (``imprecise``: its 95%
            interval is wider than :data:`bench.core.scores.IMPRECISE_WIDTH`).
        skipped_attacks: Adversaries of the cell that did not run -> why (the data lacks
            what they need, such as face identities); ``privacy_score`` is over the others.
        eval_split: The split utility and attacks were measured on (``test``; ``val``
            for tuning cells, which never enter a board).
        images: The size chain: ``native`` sizes read (min/median/max), ``stored`` (where
            the mechanism ran), ``release_shape`` ([channels, height, width] the mechanism
            ran at) and ``channels``, ``task_input`` (what the task's networks see, resized
            after the release), ``upscaled`` (images enlarged before the mechanism) with
            ``upscaled_examples`` and the loader's ``size_option`` where the loader reports them.
        groups: Utility and attacks per demographic group, with sizes, CIs, the largest
            gap per attribute and the worst group's privacy (:func:`bench.core.groups.cell_groups`);
            empty where the data labels no demographic attribute.
        runtime_s: Wall-clock seconds.
        stage_seconds: Wall-clock seconds of the cell's stages: ``data`` (reading
            or generating the dataset), ``release`` (the mechanism over every split),
            ``task`` (the utility evaluation, training its models included) and
            ``attack.<name>`` for each adversary that ran (the first face adversary's includes
            cropping the faces). Models and data a stage finds in the cache make it short.
            None in results written before they were recorded.
        versions: Package versions, the hardware (``cpu`` and ``cpu_threads``, or ``gpu``), the
            kernels' path and ``precision`` (``fp32``, or ``bf16`` mixed precision; absent in
            results written before it was recorded, which are fp32).
        git_sha: Commit of the harness, or "unknown".
        dataset_fingerprint: Content hash of the data.
        synthetic: Whether the data is a synthetic stand-in.
        device: Device the cell ran on.
        created: ISO timestamp.
        protocol: Content key of the resolved task and attack settings (presets with
            overrides) less the task's entry settings (:func:`bench.cell.protocol.protocol_key`): part
            of the board's key. Empty in results written before it was recorded.
        data_reads: Every dataset the cell read, its own included (a transfer task's
            target, the public set a mechanism fitted on): dicts of ``dataset``, ``part``
            (``splits`` or ``public``), loader ``options``, content ``fingerprint`` and
            ``synthetic`` (:func:`bench.data.base.recording_reads`). None in results
            written before they were recorded.
        schema: Serialisation schema version.
    """

    cell_key: str
    task: str
    dataset: str
    mechanism: str
    mechanism_version: int
    params: dict[str, Any]
    seed: int
    profile: str
    utility: dict[str, float]
    primary_metric: str
    attacks: dict[str, dict[str, float]]
    privacy: dict[str, float | None]
    privacy_score: float | None
    claim: dict[str, Any] | None
    runtime_s: float
    versions: dict[str, str]
    git_sha: str
    dataset_fingerprint: str
    synthetic: bool
    device: str
    created: str
    release_metrics: dict[str, float] = field(default_factory=dict)
    privacy_flags: dict[str, str] = field(default_factory=dict)
    skipped_attacks: dict[str, str] = field(default_factory=dict)
    eval_split: str = "test"
    images: dict[str, Any] = field(default_factory=dict)
    training_claim: dict[str, Any] | None = None
    groups: dict[str, Any] = field(default_factory=dict)
    protocol: str = ""
    data_reads: list[dict[str, Any]] | None = None
    stage_seconds: dict[str, float] | None = None
    privacy_score_se: float | None = None
    schema: int = RESULT_SCHEMA

    @property
    def utility_value(self) -> float:
        """The primary utility metric."""
        return self.utility[self.primary_metric]

    def to_dict(self) -> dict[str, Any]:
        """Returns the result as a JSON-ready dict (what :func:`dataclasses.asdict` returns)."""
        try:
            return {f.name: _copied(getattr(self, f.name)) for f in fields(self)}
        except _NotPlain:
            return asdict(self)

    def to_json(self) -> str:
        """Returns the result as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Result":
        """Builds a result from :meth:`to_dict` output.

        Raises:
            ValueError: The data was written with an unknown schema.
        """
        if data.get("schema") != RESULT_SCHEMA:
            raise ValueError(f"result schema {data.get('schema')!r} is not {RESULT_SCHEMA}")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


_ATOMS = (str, int, float, bool, type(None))


class _NotPlain(Exception):
    """A value other than dicts, lists, strings, numbers, booleans and None: :func:`dataclasses.asdict` copies it."""


def _copied(value: Any) -> Any:
    """Returns a copy of JSON-like data, as :func:`dataclasses.asdict` copies it, several times faster.

    Raises:
        _NotPlain: Something else is inside (a tuple, an array, a dict subclass): ``asdict`` copies those its own way.
    """
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {_copied(k): _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    raise _NotPlain
