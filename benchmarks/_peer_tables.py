"""The results of ``benchmarks/peers.py`` (one record per row and peer) and the tables they print."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # benchmarks/ is no package: peers.py loads it by path
    import _peer_impls as impls

TARGETS = {"blur": 0.8, "face_blur": 0.8}
"""Target of PrivBench / fastest peer where it is not 1.0."""


@dataclass
class PeerResult:
    """One peer's rates (None: not measured) and agreement on one row."""

    peer: "impls.Peer"
    rate1: float | None = None
    rate_pool: float | None = None
    images: int = 0
    agreement: str = ""
    counts: bool = False


@dataclass
class Row:
    """One (mechanism setting, size): PrivBench's rate per thread count and the peers'."""

    label: str
    name: str
    size: str
    privbench: dict[int, float]
    peers: list[PeerResult]

    def fastest(self) -> PeerResult | None:
        """Returns the fastest counted peer at one process, or None."""
        counted = [p for p in self.peers if p.counts and p.rate1]
        return max(counted, key=lambda p: p.rate1) if counted else None


def _rate(r: float | None) -> str:
    return "-" if not r else f"{r:,.0f}"


def render(header: tuple, body: list[tuple], markdown: bool) -> str:
    """Returns a table as aligned text or as Markdown."""
    cells = [tuple(str(x) for x in row) for row in [header, *body]]
    if markdown:
        lines = ["| " + " | ".join(r) + " |" for r in cells]
        lines.insert(1, "|" + "|".join("---" for _ in header) + "|")
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(x.ljust(wd) for x, wd in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    return "\n".join(lines)


def main_table(rows: list[Row], threads: list[int]) -> tuple[tuple, list[tuple]]:
    """Returns the header and body of the comparison with the fastest peer of the same semantics."""
    top, pool = threads[0], max(threads)
    pairs = [(top, "rate1", "1p")] + ([(pool, "rate_pool", f"{pool}p")] if pool > 1 else [])
    header = ("mechanism", "size", *(f"PrivBench {t}t img/s" for t in threads), "fastest peer",
              *(f"peer {p} img/s" for _, _, p in pairs), *(f"PB{t}t/{p}" for t, _, p in pairs), "target", "")
    body = []
    for row in rows:
        best, target = row.fastest(), TARGETS.get(row.name, 1.0)
        peer_rates = [getattr(best, attr) if best else None for _, attr, _ in pairs]
        ratios = [row.privbench[t] / r if r else None for (t, _, _), r in zip(pairs, peer_rates)]
        flag = "no peer" if not best else "BELOW" if any(r is not None and r < target for r in ratios) else "ok"
        body.append((row.label, row.size, *(_rate(row.privbench[t]) for t in threads), best.peer.name if best else "-",
                     *map(_rate, peer_rates), *("-" if r is None else f"{r:.2f}" for r in ratios), f"{target:.1f}", flag))
    return header, body


def peers_table(rows: list[Row], pool: int) -> tuple[tuple, list[tuple]]:
    """Returns every peer's rates, what its agreement check found and whether it counts."""
    header = ("mechanism", "size", "peer", "implementation", "timed on", "1p img/s", f"{pool}p pool img/s" if pool > 1 else "pool",
              "counted", "agreement with PrivBench")
    body = [(row.label, row.size, p.peer.name, p.peer.what, p.images or "-", _rate(p.rate1), _rate(p.rate_pool),
             "yes" if p.counts else "no", p.agreement) for row in rows for p in row.peers]
    return header, body


def report(head: list[str], sections: list[tuple[str, tuple]], markdown: bool) -> str:
    """Returns the head lines, then every (title, (header, body)) section's table."""
    out = ["\n\n".join(head)] if markdown else list(head)
    for title, table in sections:
        out += [f"\n## {title}\n" if markdown else f"\n{title}", render(*table, markdown)]
    return "\n".join(out)
