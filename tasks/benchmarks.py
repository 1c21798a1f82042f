"""The benchmarks: (task kind, dataset, adversaries, attribute targets), one line each.

This table is the only place a benchmark's name is declared (see
:func:`bench.core.benchmarks.declare_benchmark`). Each one's settings are
``tasks/presets/<name>.yaml`` (profiles smoke / quick / paper) unless it names another
benchmark's with ``preset=``; ``bench list benchmarks`` shows them with their adversaries.
"""

from __future__ import annotations

from bench.core.benchmarks import declare_benchmark as benchmark
from tasks.classify import PROTOCOLS, Classify
from tasks.dp_vit import DpVit
from tasks.fewshot import FewShot
from tasks.fidelity import Fidelity
from tasks.reid import Reid
from tasks.transfer import Transfer

FACES = ("face_reid", "face_reid_adapted", "denoise")
"""Face re-identification, the same adapted to the mechanism, and the denoising adversary."""
PRETRAINED = ("face_reid_pretrained", "face_reid_pretrained_adapted", "face_reid_pretrained_restored")
"""Pretrained recognizers (dlib's ResNet by default): clean enrolment, enrolment adapted to the mechanism, and
probes restored by the denoising adversary first. On by default where the faces are real; on synthetic faces
the trained adversaries are stronger and cost far less CPU (--attacks adds these there; docs/face_adversaries.md)."""
REAL_FACES = FACES + PRETRAINED
PERSONS = ("attribute_inference", "denoise")
"""Attribute inference on released images, and after denoising them."""
PEDESTRIANS = ("identity_linkage", *PERSONS)
"""Identity linkage of released queries to a clean gallery of other cameras (needs no attribute labels), then
the attribute adversaries."""

LONGER = {"quick": {"epochs": 30}, "paper": {"epochs": 30}}
FEW_PHOTOS = {"face_reid": {"enrol_per_id": 5, **LONGER, "smoke": {"folds": 2}},
              "face_reid_adapted": {"enrol_per_id": 5, **LONGER, "smoke": {"folds": 2}},
              "denoise": {"reid.enrol_per_id": 5, **{p: {"reid.epochs": 30} for p in LONGER},
                          "smoke": {"reid.folds": 2}},
              **{name: {"enrol_per_id": 5, "smoke": {"folds": 2}} for name in PRETRAINED}}
"""A person of a user's folder may have 10 photos: enrol 5, probe the rest (the paper enrols 20 of 30); with
a few hundred training photos the embedder trains longer than on 4,000 at quick and paper (6 epochs: top-1 2.2x
chance, 30: 4.2x); smoke keeps its profile's epochs (a check that the cell runs, in seconds). The folder's
test split holds at least 20 people (``min_test_classes`` in the preset); a folder too small for that is
attacked in 2 folds over all its people at smoke too, so a smoke cell attacks 20 people, or all of them."""

PROTONET = "5-way 5-shot prototypical network (Conv-4)"
REID = "regular (softmax + triplet) and centroid (CTL) ResNet reID"

# Few-shot identification (privacy-enhanced few-shot paper): faces, attacked by face re-identification.
benchmark("fewshot_synth_faces", FewShot, "synth_faces", FACES,
          description=f"{PROTONET} on synthetic face identities")
benchmark("fewshot_celeba", FewShot, "celeba", REAL_FACES,
          description=f"{PROTONET} on CelebA identities (>= 30 images)")
benchmark("fewshot_folder", FewShot, "folder", REAL_FACES,
          description=f"{PROTONET} on your own photos, a folder per person (--set task.data.root=DIR)",
          attack_settings=FEW_PHOTOS)
benchmark("fewshot_hf", FewShot, "hf", REAL_FACES,
          description=f"{PROTONET} on a local Hugging Face dataset of people (--set task.data.path=DIR)",
          attack_settings=FEW_PHOTOS)
# Omniglot and MiniImageNet measure utility only, as in the paper (Table III, Fig. 3): their
# classes are not people, so there is no identity to protect (--attacks adds adversaries).
benchmark("fewshot_omniglot", FewShot, "omniglot",
          description=f"{PROTONET} on Omniglot characters (28 x 28 grey); utility only")
benchmark("fewshot_miniimagenet", FewShot, "miniimagenet",
          description=f"{PROTONET} on MiniImageNet classes (84 x 84); utility only")

# Person re-identification (cross-camera reID paper): identity linkage, attribute inference of gender.
benchmark("reid_synth_persons", Reid, "synth_persons", PEDESTRIANS, attributes=("gender",),
          description=f"{REID} on synthetic pedestrians; mAP, CMC")
benchmark("reid_market1501", Reid, "market1501", PEDESTRIANS, attributes=("gender",),
          description=f"{REID} on Market-1501; mAP, CMC")

# FairFace (reID paper, Sec. IV-B2): the attribute adversary against the fidelity of the release.
benchmark("attributes_fairface", Fidelity, "fairface", PERSONS, attributes=("gender", "age", "race"),
          description="FairFace: attribute adversary (gender/age/race) vs image fidelity (SSIM) of the release")
benchmark("attributes_folder", Fidelity, "attribute_folder", PERSONS, attributes=("gender", "age"),
          description="your faces labelled by attributes.csv (file,gender,age; no identities): attribute adversary "
                      "vs image fidelity (SSIM) of the release (--set task.data.root=DIR)")

# DP vision transformer (DP-ViT paper): a ViT trained with DP-SGD on the release; the
# membership adversary (loss threshold, RMIA) checks the training's claim.
VIT = "ViT trained with DP-SGD (task.training.*: clipping, epsilon, fusion)"
benchmark("dp_vit_synth_objects", DpVit, "synth_objects", ("membership",),
          description=f"{VIT} on synthetic 32 x 32 objects (10 classes); top-1, top-5")
benchmark("dp_vit_cifar10", DpVit, "cifar10", ("membership",),
          description=f"{VIT} on CIFAR-10; top-1, top-5")
benchmark("dp_vit_folder", DpVit, "folder_images", ("membership",),
          description=f"{VIT} on your own class-per-folder images (--set task.data.root=DIR); top-1, top-5")

# Face obfuscation in ImageNet (face-obfuscation paper): a classifier under each of the
# paper's protocols, one benchmark (and board) per protocol. Privacy: MTCNN still finding
# the annotated faces, and re-identification of the people in the scenes from their face
# crops (synth_scenes knows their identities; ImageNet's only when the user supplies them,
# and without them its cells skip the re-identification adversaries and record so).
SCENE_FACES = ("face_detect", "face_reid", "face_reid_adapted", "denoise")
FACE_CROPS = ("face_reid", "face_reid_adapted", "denoise")
"""The adversaries of SCENE_FACES that re-identify the people from their face crops."""
SCENE_CROPS = {"face_reid": {"enrol_per_id": 4}, "face_reid_adapted": {"enrol_per_id": 4},
               "denoise": {"reid.enrol_per_id": 4}, **{name: {"enrol_per_id": 4} for name in PRETRAINED}}
"""A person of the quick scenes shows up about 25 times (100 people, ~2,600 faces): enrol 4, probe the rest.
ImageNet's people are the user's: the same, --set face_reid.enrol_per_id=N (and the others') for other counts."""
IMAGENET_IDENTITIES = "supply them with --set task.data.face_identities=CSV of url,box,identity (docs/imagenet.md)"
"""How a user supplies what the ImageNet benchmarks' face-crop adversaries need (else they are skipped)."""
PROTOCOL_TEXT = {"obf_obf": "trained and tested on released images (Table 3)",
                 "orig_obf": "trained on original, tested on released images (Table 8)",
                 "obf_orig": "trained on released, tested on original images (Table 9)"}
for _protocol in PROTOCOLS:
    benchmark(f"classify_synth_scenes_{_protocol}", Classify, "synth_scenes", SCENE_FACES,
              preset="classify_synth_scenes", task_settings={"protocol": _protocol},
              face_crops=FACE_CROPS, attack_settings=SCENE_CROPS,
              description=f"ResNet on synthetic scenes with people, {PROTOCOL_TEXT[_protocol]}; top-5, top-1")
    benchmark(f"classify_imagenet_{_protocol}", Classify, "imagenet", SCENE_FACES + PRETRAINED,
              preset="classify_imagenet", task_settings={"protocol": _protocol},
              face_crops=FACE_CROPS + PRETRAINED, optional_face_crops=IMAGENET_IDENTITIES, attack_settings=SCENE_CROPS,
              description=f"ResNet-50 on ILSVRC-2012 with its face boxes, {PROTOCOL_TEXT[_protocol]}; top-5, top-1")

# Transfer (same paper, Sec. 5): the classify model pretrained on the released source,
# finetuned on a target that is never released; one benchmark per target.
TARGETS_OF = {
    "synth_scenes": (("synth_scenes", "classes", "synth_scenes classes disjoint from the source's; top-1"),
                     ("synth_faces", "attributes", "synth_faces attributes (multi-label); mAP")),
    "imagenet": (("cifar10", "classes", "CIFAR-10; top-1"),
                 ("folder_images", "classes", "your scene folders, e.g. SUN (--set task.target_data.folder_images.root=DIR); top-1"),
                 ("celeba", "attributes", "CelebA's 40 attributes (multi-label); mAP")),
}
for _source, _targets in TARGETS_OF.items():
    for _target, _labels, _what in _targets:
        real = PRETRAINED if _source == "imagenet" else ()
        benchmark(f"transfer_{_source}_{_target}", Transfer, _source, SCENE_FACES + real, preset=f"transfer_{_source}",
                  task_settings={"target": _target, "target_labels": _labels}, face_crops=FACE_CROPS + real,
                  optional_face_crops=IMAGENET_IDENTITIES if _source == "imagenet" else "",
                  attack_settings=SCENE_CROPS,
                  description=f"backbone pretrained on released {_source}, finetuned on {_what}")

# The same paper's protocols and transfer on a user's labelled images (any classes, not only
# ILSVRC): split by image, face boxes from the data where it has them (else MTCNN finds faces
# for face_blur / face_overlay). Utility only by default, as the data's classes are not people;
# with face boxes, --attacks face_detect measures whether the release still shows the faces.
# Transfer's default target is synth_objects (always there, offline); a second folder of the
# user's is the other (docs/classify_folder.md).
USER_LABELLED = {"folder": ("labelled_folder", "your labelled images, a folder per class (--set task.data.root=DIR)"),
                 "hf": ("labelled_hf", "a local Hugging Face dataset of labelled images (--set task.data.path=DIR)")}
USER_TARGETS = (("synth_objects", "synth_objects' 10 object classes (offline, the default); top-1"),
                ("labelled_folder", "a second folder of yours (--set task.target_data.labelled_folder.root=DIR); top-1"))
for _source, (_dataset, _what) in USER_LABELLED.items():
    for _protocol in PROTOCOLS:
        benchmark(f"classify_{_source}_{_protocol}", Classify, _dataset, preset=f"classify_{_source}",
                  task_settings={"protocol": _protocol},
                  description=f"ResNet on {_what}, {PROTOCOL_TEXT[_protocol]}; top-5, top-1")
    for _target, _what_target in USER_TARGETS:
        benchmark(f"transfer_{_source}_{_target}", Transfer, _dataset, preset=f"transfer_{_source}",
                  task_settings={"target": _target, "target_labels": "classes"},
                  description=f"backbone pretrained on released {_what.split(' (')[0]}, finetuned on {_what_target}")
