"""Retrieval against gallery centroids (Eq. 5 of the cross-camera reID paper).

The gallery is replaced by class centroids, the mean embedding of an identity's gallery
images, built as Centroid-reID's evaluation builds them with ``KEEP_CAMID_CENTROIDS``
(the setting of its Market-1501 results, which the reID paper's numbers come from):

- for every identity with queries and every camera c that one of its queries comes from,
  one centroid averages that identity's gallery images *not* taken by camera c (equal
  camera sets are built once); the centroid remembers the cameras it averages;
- a query from camera c drops the centroids of its own identity that average an image of
  camera c, which is the standard protocol's rule (same identity, same camera: not a
  match) applied to centroids; every centroid of another identity stays a wrong match;
- junk images (pid -1) and distractors (pid 0) belong to no identity and build no
  centroid (optionally each distractor stays in the gallery as a one-image class).

Mean AP and CMC are then :func:`tasks.reid_metrics.evaluate_rank` over the centroids, so
ties, skipped queries and the CMC follow the image-gallery metric exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tasks.reid_metrics import evaluate_rank, query_average_precision, random_ranking

JUNK_PID = -1
DISTRACTOR_PID = 0
_NOT_A_CAMERA = -2


@dataclass(frozen=True)
class CentroidGallery:
    """Centroids of gallery identities.

    Attributes:
        features: Centroid embeddings [M, D] (means of the raw embeddings).
        pids: Identity of each centroid [M] (0 for a kept distractor image).
        cams: Cameras whose images each centroid averages: bool [M, num_cams].
    """

    features: torch.Tensor
    pids: torch.Tensor
    cams: torch.Tensor


def build_centroids(
    g_feat: torch.Tensor,
    g_pids: torch.Tensor,
    g_cams: torch.Tensor,
    q_pids: torch.Tensor,
    q_cams: torch.Tensor,
    keep_distractors: bool = False,
) -> CentroidGallery:
    """Builds the camera-aware centroid gallery described in the module docstring.

    Args:
        g_feat: Gallery embeddings [G, D].
        g_pids: Gallery identities [G] (-1 junk, 0 distractor).
        g_cams: Gallery cameras [G] (0-based).
        q_pids: Query identities [Q].
        q_cams: Query cameras [Q].
        keep_distractors: Keep each distractor image as a one-image wrong match.

    Returns:
        The centroids.
    """
    g_pids, g_cams, q_pids, q_cams = (torch.as_tensor(t).long().cpu() for t in (g_pids, g_cams, q_pids, q_cams))
    g_feat = g_feat.cpu()
    num_cams = int(max(g_cams.max(), q_cams.max())) + 1
    feats, pids, cams = [], [], []
    for pid in torch.unique(g_pids).tolist():
        if pid in (JUNK_PID, DISTRACTOR_PID):
            continue
        members = (g_pids == pid).nonzero().flatten()
        seen: set[tuple[int, ...]] = set()
        for cam in torch.unique(q_cams[q_pids == pid]).tolist():
            chosen = members[g_cams[members] != cam]
            used = tuple(torch.unique(g_cams[chosen]).tolist())
            if not used or used in seen:
                continue
            seen.add(used)
            feats.append(g_feat[chosen].mean(0))
            pids.append(pid)
            row = torch.zeros(num_cams, dtype=torch.bool)
            row[list(used)] = True
            cams.append(row)
    if keep_distractors:
        for index in (g_pids == DISTRACTOR_PID).nonzero().flatten().tolist():
            feats.append(g_feat[index])
            pids.append(DISTRACTOR_PID)
            row = torch.zeros(num_cams, dtype=torch.bool)
            row[int(g_cams[index])] = True
            cams.append(row)
    if not feats:
        raise ValueError("no gallery identity has a query: no centroid can be built")
    return CentroidGallery(torch.stack(feats), torch.tensor(pids), torch.stack(cams))


def evaluate_centroids(
    q_feat: torch.Tensor,
    q_pids: torch.Tensor,
    q_cams: torch.Tensor,
    gallery: CentroidGallery,
    max_rank: int = 50,
) -> tuple[torch.Tensor, float]:
    """Ranks the centroids for every query; returns the CMC curve and the mAP.

    Embeddings (queries and centroids) are L2-normalised before Euclidean distances are
    taken, as in Centroid-reID's evaluation. Queries are evaluated per camera: for the
    queries of camera c, a centroid that averages an image of camera c carries camera id
    c and every other centroid an id no query has, so ``evaluate_rank`` drops exactly the
    own-identity centroids that contain the query's camera.

    Args:
        q_feat: Query embeddings [Q, D].
        q_pids: Query identities [Q].
        q_cams: Query cameras [Q].
        gallery: Centroids from :func:`build_centroids`.
        max_rank: Length of the CMC curve (cut to the number of centroids).

    Raises:
        ValueError: No query has a centroid of its identity without its camera.
    """
    q_pids, q_cams = torch.as_tensor(q_pids).long().cpu(), torch.as_tensor(q_cams).long().cpu()
    max_rank = min(max_rank, len(gallery.pids))
    cmc_sum = torch.zeros(max_rank, dtype=torch.float64)
    ap_sum, valid_sum = 0.0, 0
    dist = _distances(q_feat, gallery)
    for rows, g_cams, valid in _camera_blocks(q_pids, q_cams, gallery):
        cmc, mean_ap = evaluate_rank(dist[rows], q_pids[rows], gallery.pids, q_cams[rows], g_cams, max_rank)
        cmc_sum += cmc.double() * valid
        ap_sum += mean_ap * valid
        valid_sum += valid
    if valid_sum == 0:
        raise ValueError("no query has a centroid of its identity built without its camera")
    return (cmc_sum / valid_sum).float(), ap_sum / valid_sum


def centroid_query_aps(q_feat: torch.Tensor, q_pids: torch.Tensor, q_cams: torch.Tensor,
                       gallery: CentroidGallery) -> torch.Tensor:
    """Returns each query's AP against the centroids, as :func:`evaluate_centroids` ranks them (NaN: no match)."""
    q_pids, q_cams = torch.as_tensor(q_pids).long().cpu(), torch.as_tensor(q_cams).long().cpu()
    aps = torch.full((len(q_pids),), float("nan"), dtype=torch.float64)
    dist = _distances(q_feat, gallery)
    for rows, g_cams, _ in _camera_blocks(q_pids, q_cams, gallery):
        aps[rows] = query_average_precision(dist[rows], q_pids[rows], gallery.pids, q_cams[rows], g_cams)
    return aps


def centroid_chance(q_pids: torch.Tensor, q_cams: torch.Tensor, gallery: CentroidGallery) -> float:
    """Returns the expected mAP of a random ranking of the centroids, exactly, as :func:`evaluate_centroids` ranks them.

    Each query's candidates are the centroids :func:`evaluate_centroids` keeps for it, and
    its expected AP is :func:`tasks.reid_metrics.random_ranking`'s; the mean is over the
    queries with a match (NaN where none has one).
    """
    q_pids, q_cams = torch.as_tensor(q_pids).long().cpu(), torch.as_tensor(q_cams).long().cpu()
    aps = torch.full((len(q_pids),), float("nan"), dtype=torch.float64)
    for rows, g_cams, _ in _camera_blocks(q_pids, q_cams, gallery):
        aps[rows] = random_ranking(q_pids[rows], gallery.pids, q_cams[rows], g_cams)[1]
    valid = ~torch.isnan(aps)
    return float(aps[valid].mean()) if valid.any() else float("nan")


def _distances(q_feat: torch.Tensor, gallery: CentroidGallery) -> torch.Tensor:
    """Returns the Euclidean distances of L2-normalised query and centroid embeddings."""
    return torch.cdist(F.normalize(q_feat.cpu().float(), dim=1), F.normalize(gallery.features.float(), dim=1))


def _camera_blocks(q_pids: torch.Tensor, q_cams: torch.Tensor, gallery: CentroidGallery):
    """Yields, per query camera with a possible match: (query rows, centroid camera ids, matched queries)."""
    for cam in torch.unique(q_cams).tolist():
        rows = (q_cams == cam).nonzero().flatten()
        has_cam = gallery.cams[:, cam] if cam < gallery.cams.shape[1] else torch.zeros(len(gallery.pids), dtype=torch.bool)
        valid = _has_match(q_pids[rows], gallery.pids, ~has_cam)
        if valid == 0:
            continue
        yield rows, torch.where(has_cam, torch.tensor(cam), torch.tensor(_NOT_A_CAMERA)), valid


def _has_match(q_pids: torch.Tensor, c_pids: torch.Tensor, allowed: torch.Tensor) -> int:
    """Counts queries with at least one allowed centroid of their identity."""
    ok = (q_pids[:, None] == c_pids[None, :]) & allowed[None, :] & (q_pids[:, None] > 0)
    return int(ok.any(1).sum())
