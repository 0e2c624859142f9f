"""What every GEMM design shares beside the core's protocol (specgen/design.py): the kind's TMA boxes (A, B
and the output tile, by each operand's major mode), the tile its MMA computes, the bytes one pipeline stage
of A and B holds, and how its sections resolve (`stages`: `pipeline.ab_stages` and `acc_stages`, `auto`
sized from the design's `memory`; `accumulator_registers` from the tile). Each design under designs/
subclasses GemmDesign and overrides what differs (`auto_stages`, `max_auto_stages`, `acc_stages`,
`accumulator_threads`, `memory`)."""

from __future__ import annotations

from typing import ClassVar

from specgen.design import DesignBase
from specgen.envelope.budget import MIN_STAGES
from specgen.kinds.gemm.sections import DEFAULT_EPILOGUE_STAGES, When
from specgen.kinds.gemm.spec import GemmSpec
from specgen.resolved import TmaBox
from specgen.spec.epilogue import gated_op
from specgen.targets import TargetInfo

WARPGROUP_THREADS = 128


def b_tile_columns(spec: GemmSpec) -> int:
    """The B columns one output tile reads: tile.n, or 2 tile.n with a gated epilogue (gate and up columns for
    each output; specgen/spec/epilogue.py `Gated`), which doubles the B tile and the accumulator."""
    return 2 * spec.tile.n if gated_op(spec.epilogue) is not None else spec.tile.n


def b_box_columns(spec: GemmSpec) -> int:
    """The columns of one B TMA box: an interleaved gated tile's 2 tile.n columns come in one box; the halves
    layout loads two boxes of tile.n (at n0 and N + n0)."""
    op = gated_op(spec.epilogue)
    return 2 * spec.tile.n if op is not None and op.layout == "interleaved" else spec.tile.n


def tma_boxes(spec: GemmSpec) -> tuple[TmaBox, ...]:
    """Every TMA-moved tile: (outer, inner) in elements, by the operand's major mode."""
    t = spec.tile
    bn = b_box_columns(spec)
    a = (t.m, t.k) if spec.a.major == "k" else (t.k, t.m)
    b = (bn, t.k) if spec.b.major == "k" else (t.k, bn)
    return (TmaBox("A", *a, spec.a.dtype.bytes, ("a",)), TmaBox("B", *b, spec.b.dtype.bytes, ("b",)),
            TmaBox("out", t.m, t.n, spec.out.dtype.bytes, ("out",)))


def ab_stage_bytes(spec: GemmSpec) -> int:
    """One pipeline stage: an A tile and a B tile (2 tile.n columns with a gated epilogue)."""
    t = spec.tile
    return t.m * t.k * spec.a.dtype.bytes + t.k * b_tile_columns(spec) * spec.b.dtype.bytes


def epilogue_stages(spec: GemmSpec) -> int:
    s = spec.pipeline.epilogue_stages
    return DEFAULT_EPILOGUE_STAGES if s == "auto" else s


def decode_slot(when: When | None) -> bool:
    """Whether a tuning slot serves decode-sized calls only: a variant bounded at M <= 64 (`tune_space`)."""
    return when is not None and when.m_max is not None and when.m_max <= 64


class GemmDesign(DesignBase):
    """The GEMM kind's defaults for the protocol's kind-shaped hooks."""

    max_auto_stages: ClassVar[int] = 4  # `auto` pipeline depth never goes past this

    def renders_companions_of(self, spec: GemmSpec, target: TargetInfo) -> bool:
        """A backward's GEMMs where the design renders training on `target`; a gated epilogue's only where it renders
        that backward too (`renders_gated_training_on`)."""
        return self.renders_training_on(target) and (self.renders_gated_training_on(target) or gated_op(spec.epilogue) is None)

    def tma_boxes(self, spec: GemmSpec, target: TargetInfo) -> tuple[TmaBox, ...]:
        """The boxes the module moves by TMA: one per tile where the target moves raw boxes, else none."""
        return tma_boxes(spec) if target.tma_boxes else ()

    def mma_tile(self, spec: GemmSpec) -> tuple[tuple[int, str], tuple[int, str]]:
        """The output tile, (rows, field) by (columns, field); a design that swaps A and B says its transpose."""
        return (spec.tile.m, "m"), (spec.tile.n, "n")

    # --- stages and registers (resolve.py asks `stages` and `accumulator_registers`) --------------------------
    def auto_stages(self, spec: GemmSpec, target: TargetInfo) -> int | None:
        """A fixed `auto` pipeline depth, where the design has one (None: the deepest that fits)."""
        return None

    def acc_stages(self, spec: GemmSpec, target: TargetInfo) -> int:
        """Accumulator stages for `auto`: one where the accumulator lives in registers."""
        return 1

    def accumulator_threads(self, spec: GemmSpec, target: TargetInfo) -> int:
        """Threads sharing the register accumulator: one warpgroup per 64 rows, two for wide tiles."""
        t = spec.tile
        return (2 if t.m > 64 and t.n > 128 else 1) * WARPGROUP_THREADS

    def max_ab_stages(self, spec: GemmSpec, target: TargetInfo, limit: int = 64) -> int:
        """The deepest pipeline that fits (0 when not even one stage does), capped at `limit`.

        Closed form, as `check` runs it for every (spec, target) pair: the total grows by one A/B stage per
        stage, beside the epilogue or, where the epilogue reuses the A/B buffers, over it once one stage fits;
        then checked against the budget at that depth (padding that varies with it moves it a stage)."""
        one = self.budget(spec, target, 1)
        if not one.fits:
            return 0
        room = (one.capacity - one.reserve - one.extra_bytes - one.loop_bytes
                - (0 if one.epilogue_overlaps_ab else one.epilogue_bytes))
        stages = min(limit, room // one.ab_stage_bytes - one.ab_buffers_delta)
        # A layout whose extra bytes vary with the depth (one that pads its buffers to whole KiB) moves the
        # answer by a stage at most: settle it on the budget itself.
        while stages > 0 and not self.budget(spec, target, stages).fits:
            stages -= 1
        while 0 < stages < limit and self.budget(spec, target, stages + 1).fits:
            stages += 1
        return stages

    def resolve_ab_stages(self, spec: GemmSpec, target: TargetInfo) -> int:
        """`auto` -> the design's fixed depth where it has one, else the deepest pipeline that fits, capped
        by the design and floored at MIN_STAGES (where not even two stages fit, SMEM001 reports it: a
        one-stage pipeline overlaps nothing)."""
        if spec.pipeline.ab_stages != "auto":
            return spec.pipeline.ab_stages
        fixed = self.auto_stages(spec, target)
        if fixed is not None:
            return fixed
        cap = self.max_auto_stages
        if self.budget(spec, target, cap).fits:  # the common case, one figure: resolve asks this depth's next
            return cap
        return max(MIN_STAGES, self.max_ab_stages(spec, target, cap - 1))

    def resolve_acc_stages(self, spec: GemmSpec, target: TargetInfo) -> int:
        """Accumulator stages: the spec's, else the design's (TMEM accumulators double-buffer where they fit,
        so the epilogue overlaps the next tile's MMA; register accumulators have one)."""
        if spec.pipeline.acc_stages != "auto":
            return spec.pipeline.acc_stages
        return self.acc_stages(spec, target)

    def stages(self, spec: GemmSpec, target: TargetInfo) -> tuple[int, int]:
        """(`pipeline.ab_stages`, `pipeline.acc_stages`) with `auto` filled in."""
        return self.resolve_ab_stages(spec, target), self.resolve_acc_stages(spec, target)

    def accumulator_registers(self, spec: GemmSpec, target: TargetInfo) -> tuple[int, int]:
        """(registers per thread holding the accumulator, threads sharing it: the design's). A gated epilogue's
        accumulator holds gate and up, 2 tile.n columns."""
        t = spec.tile
        words = t.m * b_tile_columns(spec) * (4 if spec.accumulator.bytes == 4 else 2) // 4
        threads = self.accumulator_threads(spec, target)
        return words // threads, threads
