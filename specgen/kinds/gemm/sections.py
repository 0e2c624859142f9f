"""The GEMM kind's spec sections: its operands and output, its configuration sections (`tile`, `cluster`,
`pipeline`, `schedule`) and a size variant's bounds (`When`: M, N, K), built on the core's generic parts
(specgen/spec/models.py: Strict, bounded, KeysAddedLater, Sparse, Bounds). kinds/gemm/spec.py lays them out
in GemmSpec and its layers; the JSON Schema names them by class (its $defs: Operand, Output, Tile, ...)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import StrictBool, model_validator

from specgen.spec.dtypes import DType
from specgen.spec.models import Bounds, KeysAddedLater, Strict, bounded

# Sanity bounds (the envelope rules then check what each target allows): a tile dim past 65536 has no
# target; clusters hold at most 16 CTAs (CLU001 says so with the numbers); pipelines a few stages; group_m
# multiplies a tile count in the kernel's int32 arithmetic. A design's option section bounds its own keys.
TileDim = bounded(65536)
ClusterDim = bounded(64)
StageCount = bounded(64)
Major = Literal["k", "mn"]
Stages = StageCount | Literal["auto"]


class Operand(Strict):
    dtype: DType
    major: Major = "k"


class Output(Strict):
    dtype: DType


class Tile(Strict):
    """The CTA (or TPU block) tile: out block m x n, reduced over k per pipeline step."""

    m: TileDim
    n: TileDim
    k: TileDim


class Cluster(Strict):
    m: ClusterDim = 1
    n: ClusterDim = 1

    @property
    def size(self) -> int:
        return self.m * self.n


DEFAULT_EPILOGUE_STAGES = 2  # `epilogue_stages = "auto"`: subtiles of the output in flight


class Pipeline(Strict):
    """Pipeline depths; `auto` is resolved by the planner from the same budget the SMEM rule checks."""

    ab_stages: Stages = "auto"
    acc_stages: Stages = "auto"
    epilogue_stages: Stages = "auto"


MAX_SPLIT_K = 64


class Schedule(KeysAddedLater):
    """Tile order: `persistent` launches one program per SM looping over tiles; `group_m` swizzles tiles
    in groups of that many rows (or columns, when `raster = "along_n"`) for L2 reuse.

    `split_k` divides each output tile's K loop between that many programs (decode shapes: few tiles,
    long K); each writes f32 partial sums and the last to finish a tile reduces them and runs the
    epilogue once (on CuTe sm90 the splits are a cluster's CTAs and meet in the first one's SMEM).
    `split_k_reduction = "deterministic"` (the default) sums the partials in split order, so results
    are bit-identical run to run; `"atomic"` adds them with float atomics instead (Triton only: less
    workspace and traffic, summation order varies)."""

    persistent: StrictBool = False
    raster: Literal["along_m", "along_n"] = "along_m"
    group_m: bounded(256) = 8
    split_k: bounded(MAX_SPLIT_K) = 1
    split_k_reduction: Literal["deterministic", "atomic"] = "deterministic"

    ADDED_LATER: ClassVar[dict[str, object]] = {"split_k": 1, "split_k_reduction": "deterministic"}


MAX_BOUND = (1 << 31) - 1  # problem sizes are int32 in the kernels
Bound = bounded(MAX_BOUND)


class When(Bounds):
    """A variant's problem-size bounds: it serves calls with M <= m_max (and N <= n_max, K <= k_max
    where given). The launcher tries the variants in the order listed, then the default config."""

    m_max: Bound | None = None
    n_max: Bound | None = None
    k_max: Bound | None = None

    @model_validator(mode="after")
    def _some(self) -> When:
        if self.m_max is None and self.n_max is None and self.k_max is None:
            raise ValueError("a variant's `when` gives at least one of m_max, n_max, k_max")
        return self

    def bounds(self) -> dict[str, int]:
        return {dim: v for dim, v in (("M", self.m_max), ("N", self.n_max), ("K", self.k_max)) if v is not None}
