"""Ranking metrics of person re-identification: CMC and mAP under the Market-1501 protocol, and the queries it ranks."""

from __future__ import annotations

from typing import Any

import torch

from bench.core.splits import SplitShape

JUNK_PID = -1

#: Bound on the elements of one [queries, gallery] block (32 MiB per int64 tensor).
_BLOCK_ELEMENTS = 1 << 22

_EULER_GAMMA = 0.5772156649015329


def evaluate_rank(
    distmat: Any,
    q_pids: Any,
    g_pids: Any,
    q_camids: Any,
    g_camids: Any,
    max_rank: int = 50,
) -> tuple[torch.Tensor, float]:
    """Computes the CMC curve and mAP of a query-by-gallery distance matrix.

    Follows the Market-1501 protocol as torchreid evaluates it: for each query, gallery
    images of the query's identity taken by the query's camera are removed, junk gallery
    images (pid -1) are removed for every query, distractors (pid 0) count as wrong
    matches, and queries without a correct match left in the gallery are skipped. AP is
    the mean of the precision at the rank of each correct match; the CMC at rank k is the
    fraction of queries whose first correct match is at rank k or better.

    A wrong match at exactly the distance of a correct one ranks before it, so ties never
    flatter a model (a model with constant features gets the worst ranking, whatever the
    gallery order). Without ties the result equals a full sort of every row.

    No gallery row is sorted: the correct matches of each query are few, so each one's
    rank is the count of kept wrong matches at or below its distance plus the correct
    matches before it. Queries are processed in blocks, which bounds memory.

    Args:
        distmat: [num_query, num_gallery] distances (smaller is closer); tensor or array.
        q_pids: [num_query] identities of the queries.
        g_pids: [num_gallery] identities of the gallery images (-1 junk, 0 distractor).
        q_camids: [num_query] camera ids of the queries.
        g_camids: [num_gallery] camera ids of the gallery images.
        max_rank: Length of the CMC curve; cut to the gallery size when larger.

    Returns:
        The CMC curve (float32 tensor [min(max_rank, num_gallery)]) and the mAP.

    Raises:
        ValueError: Shapes disagree, distances contain NaN, or no query has a correct
            match in the gallery.
    """
    dist = torch.as_tensor(distmat).detach().cpu()
    q_pids, g_pids = _ids(q_pids), _ids(g_pids)
    q_camids, g_camids = _ids(q_camids), _ids(g_camids)
    if dist.dim() != 2:
        raise ValueError(f"distmat must be 2-D, got shape {tuple(dist.shape)}")
    num_q, num_g = dist.shape
    if q_pids.shape != (num_q,) or q_camids.shape != (num_q,):
        raise ValueError(f"query pids and camids must have shape [{num_q}]")
    if g_pids.shape != (num_g,) or g_camids.shape != (num_g,):
        raise ValueError(f"gallery pids and camids must have shape [{num_g}]")
    if max_rank < 1:
        raise ValueError(f"max_rank must be >= 1, got {max_rank}")
    if not dist.is_floating_point() or dist.dtype in (torch.float16, torch.bfloat16):
        dist = dist.float()
    if torch.isnan(dist).any():
        raise ValueError("distmat contains NaN")
    max_rank = min(max_rank, num_g)

    first_hits, aps = _evaluate(dist, q_pids, q_camids, g_pids, g_camids, max_rank)
    valid = ~torch.isnan(aps)
    num_valid = int(valid.sum())
    if num_valid == 0:
        raise ValueError("no query has a correct match in the gallery")
    cmc = (first_hits.cumsum(0) / num_valid).float()
    return cmc, float(aps[valid].sum()) / num_valid


def matched_queries(query: SplitShape, gallery: SplitShape) -> int | None:
    """Returns how many queries have a gallery image of their identity taken by another camera.

    The Market-1501 protocol drops a query's same-identity gallery images of its own camera
    (and junk, pid -1), so a query without such an image has no correct match and is skipped
    (:func:`evaluate_rank`). Identity 0 counts as any other: Market-1501's queries never carry
    its distractor pid 0, while relabelled data (the synthetic persons) starts at 0.

    Args:
        query: The query split's shape, with its cameras.
        gallery: The gallery split's shape, with its cameras.

    Returns:
        The count, or None where either split's cameras are not known.
    """
    if query.cameras is None or gallery.cameras is None:
        return None
    seen = gallery.camera_images()
    return sum(images for identity, camera, images in query.cameras
               if identity != JUNK_PID and set(seen.get(identity, {})) - {camera})


def query_average_precision(distmat: Any, q_pids: Any, g_pids: Any, q_camids: Any, g_camids: Any) -> torch.Tensor:
    """Returns each query's average precision under the protocol of :func:`evaluate_rank` (NaN: no correct match).

    The mean over the non-NaN entries is :func:`evaluate_rank`'s mAP.
    """
    dist = torch.as_tensor(distmat).detach().cpu()
    if not dist.is_floating_point() or dist.dtype in (torch.float16, torch.bfloat16):
        dist = dist.float()
    return _evaluate(dist, _ids(q_pids), _ids(q_camids), _ids(g_pids), _ids(g_camids), 1)[1]


def random_ranking(q_pids: Any, g_pids: Any, q_camids: Any, g_camids: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns each query's expected rank-1 hit and AP under a uniformly random ranking, exactly (no sampling).

    The candidates of a query are those :func:`evaluate_rank` ranks: its R correct matches
    (its identity, another camera, not junk) and its wrong matches (other identities, junk
    left out). A random order puts a correct match first with probability R / N (N
    candidates), and its expected average precision is ``(H_N + (R - 1) (N - H_N) / (N - 1)) / N``
    (H_N the N-th harmonic number): position r holds a correct match with probability R / N,
    and the r - 1 positions before it then hold the other R - 1 correct matches among N - 1
    candidates with equal chance. Means over the queries with a match are the expected rank-1
    and mAP of a ranking that ignores the images.

    Args:
        q_pids: [num_query] identities of the queries.
        g_pids: [num_gallery] identities of the gallery images (-1 junk, 0 distractor).
        q_camids: [num_query] camera ids of the queries.
        g_camids: [num_gallery] camera ids of the gallery images.

    Returns:
        (expected rank-1 hit, expected AP), float64 [num_query] each, NaN where a query has
        no correct match (the protocol skips it).
    """
    q_pids, g_pids = _ids(q_pids), _ids(g_pids)
    q_camids, g_camids = _ids(q_camids), _ids(g_camids)
    junk = (g_pids == JUNK_PID)[None, :]
    correct, candidates = [], []
    step = max(1, _BLOCK_ELEMENTS // max(len(g_pids), 1))
    for start in range(0, len(q_pids), step):
        same = g_pids[None, :] == q_pids[start:start + step, None]
        hit = same & ~junk & (g_camids[None, :] != q_camids[start:start + step, None])
        correct.append(hit.sum(1))
        candidates.append((hit | ~(same | junk)).sum(1))
    r = torch.cat(correct).double() if correct else torch.zeros(0, dtype=torch.float64)
    n = torch.cat(candidates).double() if candidates else torch.zeros(0, dtype=torch.float64)
    harmonic = torch.special.digamma(n + 1) + _EULER_GAMMA
    ap = torch.where(n > 1, (harmonic + (r - 1) * (n - harmonic) / (n - 1).clamp(min=1)) / n.clamp(min=1), 1.0)
    nan = torch.tensor(float("nan"), dtype=torch.float64)
    return torch.where(r > 0, r / n.clamp(min=1), nan), torch.where(r > 0, ap, nan)


def _evaluate(dist: torch.Tensor, q_pids: torch.Tensor, q_camids: torch.Tensor, g_pids: torch.Tensor,
              g_camids: torch.Tensor, max_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (first-hit counts per rank, AP per query with NaN for queries without a match), in blocks."""
    num_q, num_g = dist.shape
    first_hits = torch.zeros(max_rank, dtype=torch.float64)
    aps = []
    step = max(1, _BLOCK_ELEMENTS // max(num_g, 1))
    for start in range(0, num_q, step):
        stop = min(start + step, num_q)
        hits, ap = _evaluate_block(dist[start:stop], q_pids[start:stop], q_camids[start:stop], g_pids, g_camids,
                                   max_rank)
        first_hits += hits
        aps.append(ap)
    return first_hits, torch.cat(aps) if aps else torch.zeros(0, dtype=torch.float64)


def _ids(values: Any) -> torch.Tensor:
    return torch.as_tensor(values).detach().cpu().reshape(-1).to(torch.int64)


def _evaluate_block(
    dist: torch.Tensor,
    q_pids: torch.Tensor,
    q_camids: torch.Tensor,
    g_pids: torch.Tensor,
    g_camids: torch.Tensor,
    max_rank: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (first-hit counts per rank [max_rank], AP per query [num_q], NaN where no match is left)."""
    num_q = dist.shape[0]
    junk = (g_pids == JUNK_PID)[None, :]
    same_pid = g_pids[None, :] == q_pids[:, None]
    correct = same_pid & ~junk & (g_camids[None, :] != q_camids[:, None])
    wrong = ~(same_pid | junk)
    del same_pid
    num_rel = correct.sum(1)
    most = int(num_rel.max()) if num_q else 0
    if most == 0:
        return torch.zeros(max_rank, dtype=torch.float64), torch.full((num_q,), float("nan"), dtype=torch.float64)

    inf = torch.tensor(float("inf"), dtype=dist.dtype)
    correct_dist = torch.where(correct, dist, inf).topk(most, dim=1, largest=False, sorted=True).values
    del correct
    # bucket b of a wrong match = number of correct matches strictly closer; it ranks
    # before correct match j (0-based, by distance) exactly when b <= j.
    bucket = torch.searchsorted(correct_dist, dist)
    bucket = torch.where(wrong, bucket, most + 1)
    del wrong
    width = most + 2
    bucket += torch.arange(num_q)[:, None] * width
    counts = torch.bincount(bucket.flatten(), minlength=num_q * width).view(num_q, width)
    del bucket
    wrong_before = counts[:, :most].cumsum(1)

    nth = torch.arange(1, most + 1, dtype=torch.float64)
    rank = wrong_before.double() + nth
    is_real = nth[None, :] <= num_rel[:, None]
    valid = num_rel > 0
    ap = torch.where(valid, torch.where(is_real, nth / rank, 0.0).sum(1) / num_rel.clamp(min=1), float("nan"))

    first = rank[valid, 0].long()
    first = first[first <= max_rank] - 1
    hits = torch.bincount(first, minlength=max_rank).double()
    return hits, ap
