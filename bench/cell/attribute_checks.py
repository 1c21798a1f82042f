"""Checks that a cell's data labels the attributes its adversaries infer, before any work.

A dataset's :meth:`~bench.data.base.Dataset.inspect` may say which attributes its
images are labelled with (``SplitShape.attributes``; Market-1501 without its attribute
file labels none); an attribute adversary of such data would otherwise fail after the
task's models have trained, with its MLflow run left failed.
"""

from __future__ import annotations

from typing import Any

from bench.core.interfaces import Task
from bench.errors import BenchError


def inferred_attributes(task_cls: type, name: str, attack: Any) -> tuple[str, ...]:
    """Returns the attributes an adversary infers in a benchmark's cells (empty: none).

    ``attribute_inference`` infers its configured attributes, else the benchmark's;
    ``denoise`` the benchmark's where its targets (configured, else the benchmark's) include them.
    """
    declared = getattr(task_cls, "benchmark", None)
    config = getattr(attack, "config", None)
    if declared is None or config is None:
        return ()
    if name == "attribute_inference":
        return tuple(getattr(config, "attributes", None) or declared.attributes)
    if name == "denoise" and "attributes" in (getattr(config, "targets", None) or declared.denoise_targets()):
        own = getattr(getattr(getattr(attack, "attribute", None), "config", None), "attributes", None)
        return tuple(own or declared.attributes)
    return ()


def unlabelled_defaults(task: Task, attacks: dict[str, Any], shape: Any) -> dict[str, str]:
    """Returns the benchmark's default adversaries that infer attributes the data does not label -> why.

    A cell that runs its benchmark's defaults (no ``--attacks``) leaves them out rather than
    being refused, where another adversary remains to measure privacy (Market-1501 without
    its attribute file keeps ``identity_linkage``); an adversary the user named is never
    left out (:func:`check_attributes` refuses it).
    """
    have = _labelled(shape)
    if have is None:
        return {}
    out = {}
    for name, attack in attacks.items():
        missing = [a for a in inferred_attributes(type(task), name, attack) if a not in have]
        if missing:
            out[name] = (f"the {task.dataset} data does not label {', '.join(missing)} "
                         f"(it labels {', '.join(sorted(have)) or 'no attribute'})")
    return out if len(out) < len(attacks) else {}


def _labelled(shape: Any) -> set[str] | None:
    """Returns the attributes every non-empty split labels, or None where the shape does not say."""
    if not shape:
        return None
    labelled = {split: set(s.attributes) for split, s in shape.items()
                if getattr(s, "attributes", None) is not None and s.images}  # an empty split labels nothing
    return set.intersection(*labelled.values()) if labelled else None


def check_attributes(task: Task, attacks: dict[str, Any], shape: Any) -> None:
    """Checks that the data labels the attributes its adversaries infer, where its shape says which it labels.

    Raises:
        BenchError: An adversary infers an attribute the data does not label; the message
            names the ``--attacks`` that leaves the attribute adversaries out.
    """
    inferring = attacks.get("attribute_inference")
    declared = getattr(type(task), "benchmark", None)
    if inferring is not None and not (getattr(getattr(inferring, "config", None), "attributes", None)
                                      or getattr(declared, "attributes", None)):
        raise BenchError(f"attack 'attribute_inference' has no attribute to infer on {task.dataset}: neither its "
                         "benchmark nor --set attribute_inference.attributes=NAME names one")
    if not shape:
        return
    labelled = {split: set(s.attributes) for split, s in shape.items()
                if getattr(s, "attributes", None) is not None and s.images}  # an empty split labels nothing
    if not labelled:
        return
    have = set.intersection(*labelled.values())
    needing = {name: [a for a in inferred_attributes(type(task), name, attack) if a not in have]
               for name, attack in attacks.items()}
    needing = {name: missing for name, missing in needing.items() if missing}
    if not needing:
        return
    name, missing = next(iter(needing.items()))
    others = ",".join(n for n in attacks if n not in needing) or "none"
    lacking = [split for split, attrs in labelled.items() if missing[0] not in attrs]
    where = (f"the {task.dataset} data" if len(lacking) == len(labelled)
             else f"the {'/'.join(lacking)} split of the {task.dataset} data (no image there has a value)")
    setting = "denoise.attributes.attributes" if name == "denoise" else f"{name}.attributes"
    instead = f"infer what it labels with --set {setting}={','.join(sorted(have))}, " if have else ""
    raise BenchError(f"attack {name!r} infers {', '.join(missing)}, which {where} does not label "
                     f"(it labels {', '.join(sorted(have)) or 'no attribute'}): add the attribute annotations its "
                     f"layout names (bench list datasets), {instead}or leave the attribute adversaries out with "
                     f"--attacks {others}")
