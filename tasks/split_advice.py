"""What to change when a split has fewer classes than an episode's way: the class split, named with a value.

A task that draws N-way episodes from a split needs N classes in it. When the split has
fewer classes in all (not too few images per class), the fix is the dataset's class
split (``Dataset.class_split``: ``split_fractions`` or ``split_ids``), not the images per
class: :func:`class_split_advice` names that setting with a value that gives every split
what it needs, moving classes from the splits with the most to spare.
"""

from __future__ import annotations

import math
from typing import Mapping

from bench.data.base import DataShape

SPLITS = ("train", "val", "test")


def class_split_advice(setting: str, shape: DataShape, minimums: Mapping[str, int], way_name: str) -> str:
    """Returns the advice that ends the error of a split with too few classes.

    Args:
        setting: The dataset's ``class_split`` option (empty: its splits are fixed).
        shape: The splits' shapes (:meth:`Dataset.inspect`).
        minimums: Split -> the classes it needs (splits not named need one, where present).
        way_name: The task setting of the way that failed (``test_way``), the other fix.

    Returns:
        A clause such as ``give it more classes with --set task.data.split_fractions=0.55,0.2,0.25
        (train/val/test 11/4/5 of the data's 20 classes), or lower task.test_way``.
    """
    present = [s for s in SPLITS if s in shape]
    counts = {s: len(shape[s].counts) for s in present}
    total = sum(counts.values())
    needs = {s: max(1 if counts[s] else 0, minimums.get(s, 0)) for s in present}
    if not setting:
        return f"lower task.{way_name}, or add classes to the data"
    if total < sum(needs.values()):
        shown = "/".join(str(needs[s]) for s in present)
        return (f"the data has {total} classes in all and the episodes need {shown} ({'/'.join(present)}): "
                f"add classes, or lower task.{way_name}")
    wanted = rebalance(counts, needs)
    shown = "/".join(str(wanted[s]) for s in present)
    return (f"give it more classes with --set task.data.{setting}={_value(setting, wanted, total)} "
            f"({'/'.join(present)} {shown} of the data's {total} classes), or lower task.{way_name}")


def rebalance(counts: Mapping[str, int], needs: Mapping[str, int]) -> dict[str, int]:
    """Returns class counts that meet ``needs``: each short split takes classes, one at a time, from the split
    with the most to spare (the first in train / val / test order on ties).

    The total must cover the needs (the caller checks).
    """
    out = dict(counts)
    for split in out:
        while out[split] < needs[split]:
            donor = max(out, key=lambda s: (out[s] - needs[s], -list(out).index(s)))
            out[donor] -= 1
            out[split] += 1
    return out


def _value(setting: str, counts: Mapping[str, int], total: int) -> str:
    """Formats the counts as the setting takes them: ``[a,b,c]`` counts, or ``a,b,c`` fractions summing to 1."""
    values = [counts.get(s, 0) for s in SPLITS]
    if setting != "split_fractions":
        return "[" + ",".join(str(v) for v in values) + "]"
    digits = max(2, math.ceil(math.log10(max(total, 1))) + 1)
    val, test = (round(v / total, digits) for v in values[1:])
    return ",".join(f"{f:g}" for f in (round(1 - val - test, digits), val, test))
