"""Identification and verification with pretrained embeddings: the face-recognition conventions.

Each enrolled identity's template is the mean of its L2-normalised enrolment embeddings,
normalised again; a probe is scored by its cosine similarity to every template. Several
recognizers are combined per probe by averaging their similarity matrices (score-level
fusion, as the de-identification benchmarks combine ArcFace, AdaFace and CosFace).

- identification: top-1, the probe's best-scoring template is its own identity;
- verification: TAR at a FAR, over every (probe, template) pair: the impostor pairs set the
  threshold that accepts at most that fraction of them, and TAR is the fraction of genuine
  pairs above it. It is undefined (NaN) where fewer than ``1 / FAR`` impostor pairs exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FARS = {1e-3: "tar_far1e-3", 1e-2: "tar_far1e-2"}
"""FAR -> metric name (MLflow metric names cannot hold ``@`` or ``=``)."""


@dataclass(frozen=True)
class Gallery:
    """Enrolled identities: one normalised template per identity.

    Attributes:
        ids: Identity labels, sorted [I].
        templates: float32 [I, D].
    """

    ids: np.ndarray
    templates: np.ndarray

    @classmethod
    def enrol(cls, embeddings: np.ndarray, labels: np.ndarray) -> "Gallery":
        """Returns the gallery of the given enrolment embeddings and their identities."""
        ids, inverse = np.unique(labels, return_inverse=True)
        sums = np.zeros((len(ids), embeddings.shape[1]), np.float64)
        np.add.at(sums, inverse, embeddings)
        norms = np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
        return cls(ids, (sums / norms).astype(np.float32))

    def scores(self, probes: np.ndarray) -> np.ndarray:
        """Returns the cosine similarities [P, I] of probe embeddings to the templates."""
        return probes @ self.templates.T


def fuse(scores: list[np.ndarray]) -> np.ndarray:
    """Returns the per-probe average of several recognizers' similarity matrices."""
    return np.mean(np.stack(scores), axis=0)


def hits(scores: np.ndarray, ids: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Returns, per probe, whether its best-scoring identity is its own."""
    return ids[np.argmax(scores, axis=1)] == truth


def tar_at_far(scores: np.ndarray, ids: np.ndarray, truth: np.ndarray, far: float) -> float:
    """Returns the fraction of genuine pairs accepted at the threshold that accepts ``far`` of impostors.

    Args:
        scores: Similarities [P, I].
        ids: The templates' identities [I].
        truth: Each probe's identity [P] (every one enrolled).
        far: The false-accept rate the threshold is set at.

    Returns:
        TAR, or NaN where fewer than ``1 / far`` impostor pairs exist.
    """
    genuine_mask = ids[None, :] == truth[:, None]
    genuine, impostor = scores[genuine_mask], np.sort(scores[~genuine_mask])
    if len(impostor) < round(1 / far) or not len(genuine):
        return float("nan")
    allowed = int(np.floor(far * len(impostor)))  # impostor pairs strictly above the threshold
    threshold = impostor[len(impostor) - allowed - 1]
    return float(np.mean(genuine > threshold))


def verification(scores: np.ndarray, ids: np.ndarray, truth: np.ndarray, suffix: str = "") -> dict[str, float]:
    """Returns ``tar_far1e-3<suffix>`` and ``tar_far1e-2<suffix>``: TAR at each FAR of :data:`FARS`."""
    return {f"{name}{suffix}": tar_at_far(scores, ids, truth, far) for far, name in FARS.items()}
