"""The rules every GEMM design shares (the kind's part `rules`, found by specgen/kinds/lineup.py): the
dtypes the MMA families take and the kernel stores, MMA instruction shapes, the SMEM budget, TMA boxes,
clusters, split-K, a gated epilogue, a training backward. Each design's own rules sit in its package's rules.py."""

from __future__ import annotations

from specgen.kinds.gemm.shared_rules import cluster, dtypes, gated, memory, mma, split_k, tma, training
from specgen.rules.base import Rule

RULES: list[Rule] = [r for m in (dtypes, mma, memory, tma, cluster, split_k, gated, training) for r in m.RULES]
