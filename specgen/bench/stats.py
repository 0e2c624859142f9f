"""The statistics every specgen timing reads through: the rotating order of a round, a median with a
distribution-free ~95% interval, the paired ratio per round, and the one geometric mean. Standard
library only (the tuner's tests run them with a fake timer on a CPU)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict


def rotation(names: Sequence[str], i: int) -> list[str]:
    """Round i's order of `names`, rotated by i: over len(names) rounds each call takes each place (AB, BA,
    AB, ... for two), so no call always runs right after the same one."""
    k = i % len(names) if names else 0
    return [*names[k:], *names[:k]]


def median_ci(xs: Iterable[float]) -> tuple[float, float, float]:
    """Median and a distribution-free ~95% interval for it (order statistics n/2 -+ 0.98 sqrt(n))."""
    s = sorted(xs)
    if not s:
        raise ValueError("median_ci of no samples")
    n = len(s)
    half = 0.98 * n ** 0.5
    lo, hi = max(0, int(n / 2 - half)), min(n - 1, int(n / 2 + half))
    return statistics.median(s), s[lo], s[hi]


class Paired(BaseModel):
    """One paired comparison: medians of both sides (us) and the median over rounds of
    baseline / candidate (> 1: the candidate is faster) with its ~95% interval."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ours_us: float
    peer_us: float
    ratio: float
    ratio_lo: float
    ratio_hi: float
    pairs: int


def paired(ours: Sequence[float], peer: Sequence[float]) -> Paired:
    """Round i's peer time / round i's time of ours, for every round: rounds ran at (nearly) one clock."""
    if len(ours) != len(peer) or not ours:
        raise ValueError(f"paired needs the same number of rounds on both sides (got {len(ours)} and {len(peer)})")
    med, lo, hi = median_ci(p / o for o, p in zip(ours, peer, strict=True))
    return Paired(ours_us=statistics.median(ours), peer_us=statistics.median(peer), ratio=med, ratio_lo=lo,
                  ratio_hi=hi, pairs=len(ours))


def geomean(xs: Iterable[float]) -> float:
    """The one geometric mean of ratios (a bench table's summary, a tuner's score over shapes)."""
    vals = list(xs)
    if not vals:
        raise ValueError("geomean of no values")
    if any(v <= 0 for v in vals):
        raise ValueError(f"geomean of non-positive values: {[v for v in vals if v <= 0]}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
