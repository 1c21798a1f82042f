"""Image classification under the face-obfuscation paper's three protocols (Yang et al. 2022).

A torchvision architecture (``arch``: resnet18 ... densenet201, from scratch or from local
weights, never downloaded) is trained with the paper's SGD recipe
(:class:`bench.nn.stream_train.SgdSchedule`) and tested under ``protocol``:

- ``obf_obf``: trained on the released (face-obfuscated) train split, tested on the
  released test split (the paper's Table 3);
- ``orig_obf``: trained on the original train split, tested on the released test split
  (Table 8);
- ``obf_orig``: trained on the released train split, tested on the original test split
  (Table 9).

Each protocol is its own benchmark (``classify_<dataset>_<protocol>``, declared in
``tasks/benchmarks.py``), so boards never pool them. Every cell also measures the model
trained on original images on the original test split (cached: one per data, architecture,
schedule and seed, shared by every mechanism and protocol), and reports the drop against
it: top-1 / top-5 (primary: top-5, as the paper; each drop with a paired bootstrap 95%
interval over the test images, ``*_drop_ci95``: the half-width), mean per-class AP, and the paper's
analysis (Sec. 4, Fig. 4): each class's top-1 and top-5 drops against the fraction of its
object boxes covered by faces (``face_drop_r``, ``face_drop5_r``: Pearson's r, with
p-values; the paper's Fig. 4 finds r = 0.32 top-1, 0.46 top-5 for blurring; its Fig. 3,
r = 0.28 / 0.44, uses the blurred fraction of the whole image instead). The identity
release shares the original model,
so its drops are exactly 0.

Local weights trained on images with visible faces have learned what the ``obf_*``
protocols remove, so they are refused there unless ``weights_saw_faces`` is false (the
user's statement that they were trained on obfuscated images).

Per-class top-1 and AP go into the run's ``per_class`` table (an artifact of the cell).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

import torch

from bench.core.config import setting
from bench.core.interfaces import Release, RunContext, Task
from bench.data.base import DataShape, Splits
from bench.errors import BenchError
from bench.nn.classifiers import ARCHS, Classifier, check_input
from bench.nn.ddp import BACKENDS, run_data_parallel, world_size
from bench.nn.stream_train import SgdSchedule, predict, train_streamed
from bench.randomness.seeding import derive_seed, make_generator
from bench.storage.modelcache import cached_model
from bench.system import precision
from tasks.class_metrics import (
    bootstrap_mean_interval,
    class_count,
    correlation,
    nanmean,
    per_class_accuracy,
    per_class_ap,
    proportion_ci95,
    topk_accuracy,
    topk_hits,
)

MODEL_VERSION = 1
PROTOCOLS = ("obf_obf", "orig_obf", "obf_orig")
TRAINED_ON = {"obf_obf": "released", "orig_obf": "original", "obf_orig": "released"}
TESTED_ON = {"obf_obf": "released", "orig_obf": "released", "obf_orig": "original"}


@dataclass(frozen=True)
class Recipe:
    """What a classifier trained on a (released) dataset depends on besides the data and seed.

    Attributes:
        arch: torchvision architecture.
        weights: A local torchvision state dict to start from, or None (from scratch).
        weights_saw_faces: Whether ``weights`` were trained on images with visible faces
            (refused wherever the model should not have seen faces); set false only for
            weights trained on face-obfuscated images.
        input_size: Side of the network's square input (training crops and test views).
        schedule: The SGD recipe.
        processes: Data-parallel processes (one per GPU; None: every visible GPU, 1 on CPU).
        backend: ``torch.distributed`` backend (auto: nccl on CUDA, gloo on CPU).
    """

    arch: str = setting("resnet18", choices=ARCHS)
    weights: str | None = setting(None, path=True)
    weights_saw_faces: bool = True
    input_size: int = setting(224, low=8)
    schedule: SgdSchedule = field(default_factory=SgdSchedule)
    processes: int | None = setting(None, low=1)
    backend: str = setting("auto", choices=BACKENDS)

    def refuse_face_weights(self, owner: str, why: str) -> None:
        """Refuses local weights that saw faces where the model must not have (``why`` says where).

        Raises:
            BenchError: ``weights`` is set and ``weights_saw_faces`` is true.
        """
        if self.weights and self.weights_saw_faces:
            raise BenchError(f"{owner}: local weights {self.weights} were trained on images with visible faces, "
                             f"which {why}; they are refused (set weights_saw_faces=false only if they were "
                             "trained on face-obfuscated images)")


@dataclass(frozen=True)
class ClassifyConfig(Recipe):
    """Settings of a classify profile (``tasks/presets/classify_<dataset>.yaml``): the recipe, plus:

    Attributes:
        data: Loader options of the dataset.
        protocol: What the model trains and is tested on (fixed by the benchmark).
    """

    data: dict = field(default_factory=dict)
    protocol: str = setting("obf_obf", choices=PROTOCOLS)


class RecipeTask(Task):
    """A task whose config extends :class:`Recipe` with the dataset's loader options (``data``)."""

    validation: ClassVar[bool] = True
    precisions: ClassVar[tuple[str, ...]] = ("fp32", "bf16")

    def recipe(self) -> Recipe:
        """Returns the training recipe of this profile's (source) models."""
        return Recipe(**{f.name: getattr(self.config, f.name) for f in fields(Recipe)})

    def data_options(self) -> dict[str, Any]:
        """Returns the loader options of this profile."""
        return dict(self.config.data)

    def input_size(self) -> tuple[int, int]:
        """Returns the network's input size."""
        return (self.config.input_size, self.config.input_size)

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved configuration."""
        return asdict(self.config)

    def check_recipe(self, shape: DataShape | None, splits: tuple[str, ...]) -> None:
        """Checks that the dataset has ``splits`` and that the architecture takes the input size.

        Raises:
            BenchError: A missing split, or an input the network cannot take.
        """
        for split in splits:
            if shape is not None and split not in shape:
                raise BenchError(f"{self.owner}: dataset {self.dataset!r} has no {split!r} split")
        check_input(self.config.arch, self.config.input_size, self.owner)


class Classify(RecipeTask):
    """Classification trained and tested under one of the paper's protocols; top-5 / top-1 and their drops."""

    metrics: ClassVar[dict[str, bool]] = {
        "top5": True, "top1": True, "top5_ci95": False, "top1_ci95": False,
        "top5_original": True, "top1_original": True, "top5_drop": False, "top1_drop": False,
        "top5_drop_ci95": False, "top1_drop_ci95": False,
        "map": True, "map_original": True, "face_drop_r": False, "face_drop_p": True, "face_drop5_r": False,
        "face_drop5_p": True, "face_drop_classes": True,
    }
    primary: ClassVar[str] = "top5"
    description: ClassVar[str] = "torchvision classifier under a face-obfuscation protocol; top-5, top-1, per-class AP"
    config_class: ClassVar[type] = ClassifyConfig
    version: ClassVar[int] = MODEL_VERSION

    def __init__(self, profile: str = "quick", overrides: Any = None):
        super().__init__(profile, overrides)
        if self.config.protocol != "orig_obf":
            self.recipe().refuse_face_weights(self.owner, f"protocol {self.config.protocol} removes")

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks the splits the cell needs and that the architecture takes the input size.

        Raises:
            BenchError: A missing train or evaluated split, or an input the network cannot take.
        """
        self.check_recipe(shape, ("train", eval_split))

    def evaluate(self, clean: Splits, released: Release, ctx: RunContext) -> dict[str, float]:
        """Trains (or reuses) the protocol's model and the original one; tests both and compares classes."""
        cfg, split = self.config, ctx.eval_split
        classes = class_count(clean)
        original = self.model(clean, None, ctx)
        shared = TRAINED_ON[cfg.protocol] == "original" or source_key(clean, released)[0] == "original"
        trained = original if shared else self.model(clean, released, ctx)
        tested = released.splits[split] if TESTED_ON[cfg.protocol] == "released" else clean[split]
        labels = clean[split].labels
        record_split(clean, ctx)
        ctx.log(f"testing on the {TESTED_ON[cfg.protocol]} {split} split")
        scores = predict(trained, tested.images, cfg.input_size, ctx.device)
        reference = scores if trained is original and tested is clean[split] else (
            predict(original, clean[split].images, cfg.input_size, ctx.device))
        top1, top5 = topk_accuracy(scores, labels)
        ref1, ref5 = topk_accuracy(reference, labels)
        acc, acc_ref = per_class_accuracy(scores, labels, classes), per_class_accuracy(reference, labels, classes)
        acc5 = per_class_accuracy(scores, labels, classes, k=5)
        acc5_ref = per_class_accuracy(reference, labels, classes, k=5)
        ap, ap_ref = per_class_ap(scores, labels, classes), per_class_ap(reference, labels, classes)
        fraction = class_face_fraction(clean, split, classes)
        r, r5 = correlation(fraction, acc_ref - acc), correlation(fraction, acc5_ref - acc5)
        names = clean.info.get("classes") or [str(c) for c in range(classes)]
        ctx.tables["per_class"] = [
            {"class": names[c], "images": int((labels == c).sum()), "face_fraction": fraction[c].item(),
             "top1": acc[c].item(), "top1_original": acc_ref[c].item(), "top5": acc5[c].item(),
             "top5_original": acc5_ref[c].item(), "ap": ap[c].item(), "ap_original": ap_ref[c].item()}
            for c in range(classes)]
        n = len(labels)
        g = make_generator(ctx.seed, "classify", "drop interval")
        drop1 = bootstrap_mean_interval(topk_hits(reference, labels, 1) - topk_hits(scores, labels, 1), g)
        drop5 = bootstrap_mean_interval(topk_hits(reference, labels, 5) - topk_hits(scores, labels, 5), g)
        return {
            "top5": top5, "top1": top1, "top5_ci95": proportion_ci95(top5, n), "top1_ci95": proportion_ci95(top1, n),
            "top5_original": ref5, "top1_original": ref1, "top5_drop": ref5 - top5, "top1_drop": ref1 - top1,
            "top5_drop_ci95": (drop5[1] - drop5[0]) / 2, "top1_drop_ci95": (drop1[1] - drop1[0]) / 2,
            "map": nanmean(ap), "map_original": nanmean(ap_ref),
            "face_drop_r": r["r"], "face_drop_p": r["p"], "face_drop5_r": r5["r"], "face_drop5_p": r5["p"],
            "face_drop_classes": float(r["n"]),
        }

    def model(self, clean: Splits, released: Release | None, ctx: RunContext) -> Classifier:
        """Returns the classifier trained on the release's train split (None or identity: the original one, shared)."""
        return trained_classifier(clean, released, self.recipe(), ctx)


def trained_classifier(clean: Splits, released: Release | None, recipe: Recipe, ctx: RunContext) -> Classifier:
    """Returns a classifier trained on the released train split by ``recipe``, training it on first use.

    Cached by (data, recipe, seed, device type, processes): the model trained on original
    images (``released`` None or the identity release) is shared by every mechanism, every
    protocol and every transfer benchmark of the same recipe.
    """
    data_key = source_key(clean, released)
    data, label = (clean, "original") if data_key[0] == "original" else (released.splits, "released")
    classes = class_count(clean)
    train = data["train"]
    schedule = recipe.schedule
    processes = world_size(recipe.processes, ctx.device)
    key = ("classify-model", MODEL_VERSION, data_key, recipe.arch, _weights_key(recipe.weights), recipe.input_size,
           asdict(schedule), classes, ctx.seed, ctx.device.type, processes)
    init, order = derive_seed(ctx.seed, "classify", "init"), derive_seed(ctx.seed, "classify", "train")

    def build() -> Classifier:
        return _new_classifier(recipe.arch, classes, recipe.weights, init, ctx.device)

    def fit(model: Classifier) -> dict[str, Any]:
        ctx.log(f"training the {label} {recipe.arch} on {len(train)} images ({processes} process(es))")
        if processes > 1:
            state, info = run_data_parallel(processes, ctx.device, _train_rank, recipe.arch, classes, recipe.weights,
                                            train.images, train.labels, schedule, recipe.input_size, init, order,
                                            backend=recipe.backend)
            model.load_state_dict(state)
            model.eval()
            return info
        return train_streamed(model, train.images, train.labels, schedule, recipe.input_size, ctx, order,
                              desc=f"{label} {recipe.arch} epochs")

    model, _ = cached_model(ctx.cache_dir, key, build, fit, ctx.log, name=f"classify.{label}")
    return model


def record_split(clean: Splits, ctx: RunContext) -> None:
    """Logs how the data was split (a user's labelled data records its rule in ``info["split"]``) and keeps it
    as the cell's ``data_split`` table: one row per split with its images, classes and the rule."""
    rule = clean.info.get("split")
    if not isinstance(rule, str):
        return
    ctx.log(f"{clean.dataset} split: {rule}")
    ctx.tables["data_split"] = [{"split": name, "images": len(part), "classes": int(part.labels.unique().numel()),
                                 "rule": rule} for name, part in clean.sets.items()]


def source_key(clean: Splits, released: Release | None) -> tuple[str, str]:
    """Returns what a model trained on the (released) train split is keyed by: ``("original", fingerprint)``
    for clean data (no release, or the identity's), else ``("released", release key)``."""
    if released is None or released.is_clean:
        return ("original", clean.fingerprint)
    return ("released", released.key)


def class_face_fraction(clean: Splits, split: str, classes: int) -> torch.Tensor:
    """Returns float64 [classes]: the mean fraction of the object box covered by faces over each class's images.

    Read from the dataset's per-image measure (synth_scenes: ``info["face_fraction"]``;
    imagenet: ``info["object_face_fraction"]``, NaN without object boxes); NaN for a class
    without a defined value, and everywhere when the dataset has no such measure.
    """
    per_image = None
    for name in ("face_fraction", "object_face_fraction"):
        table = clean.info.get(name)
        if isinstance(table, dict) and split in table:
            per_image = torch.as_tensor(table[split], dtype=torch.float64)
            break
    if per_image is None:
        return torch.full((classes,), math.nan, dtype=torch.float64)
    labels = clean[split].labels
    defined = ~torch.isnan(per_image)
    total = torch.zeros(classes, dtype=torch.float64).index_add_(0, labels[defined], per_image[defined])
    count = torch.bincount(labels[defined], minlength=classes).double()
    return (total / count).where(count > 0, torch.tensor(math.nan, dtype=torch.float64))


def _weights_key(path: str | None) -> str | None:
    """Returns a content digest of a local weights file (the model depends on its bytes, not its name)."""
    if not path:
        return None
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256()
    with Path(path).expanduser().open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _new_classifier(arch: str, classes: int, weights: str | None, init: int, device: torch.device) -> Classifier:
    """Returns a classifier initialised from seed ``init`` on ``device``, in the precision's memory format."""
    torch.manual_seed(init)
    return Classifier(arch, classes, weights).to(device, memory_format=precision.memory_format())


def _train_rank(device: torch.device, arch: str, classes: int, weights: str | None, images: Any,
                labels: torch.Tensor, schedule: SgdSchedule, input_size: int, init: int,
                order: int) -> tuple[dict, dict]:
    """One rank of a data-parallel training (:func:`bench.nn.ddp.run_data_parallel`); returns the weights and facts."""
    model = _new_classifier(arch, classes, weights, init, device)
    ctx = RunContext(device=device, seed=order, profile="", data_root=None, cache_dir=None)  # type: ignore[arg-type]
    info = train_streamed(model, images, labels, schedule, input_size, ctx, order)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, info
