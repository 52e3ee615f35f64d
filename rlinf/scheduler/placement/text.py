"""Short texts used in placement messages and the grid: rank lists, rank ranges, node summaries."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def format_ranks(ranks: Sequence[int]) -> str:
    """Compact text for ascending ranks: runs of three or more become ``a-b``.

    >>> format_ranks([0, 1, 2, 3, 5, 7, 8])
    '0-3,5,7,8'
    """
    out: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{ranks[i]}-{ranks[j]}")
        else:
            out.extend(str(r) for r in ranks[i:j + 1])
        i = j + 1
    return ",".join(out)


def rank_range(n: int) -> str:
    """The valid ranks among ``n`` (``n >= 1``) as placement text: ``0`` or ``0-{n-1}``.

    >>> rank_range(1), rank_range(16)
    ('0', '0-15')
    """
    return "0" if n == 1 else f"0-{n - 1}"


def describe_nodes(counts: Sequence[int]) -> str:
    """Summarise per-node accelerator counts, e.g. ``2 nodes x 8, 1 CPU-only node``.

    >>> describe_nodes([8, 8, 4, 0])
    '2 nodes x 8, 1 node x 4, 1 CPU-only node'
    """
    parts = []
    for count, nodes in Counter(counts).items():
        noun = "node" if nodes == 1 else "nodes"
        parts.append(f"{nodes} CPU-only {noun}" if count == 0 else f"{nodes} {noun} x {count}")
    return ", ".join(parts)
