"""The group metadata of a Mosaic GPU grouped module's direct torch launch in one Triton kernel: value for value
runtime/grouped_jax.py's `group_row_starts` (the jitted program's, which XLA fuses into a few kernels), computed
from torch._grouped_mm's `offs` (or the sizes) on the device, so a CUDA graph captures it and its replays take new
group sizes. runtime/grouped.py's torch-ops form of the same values took about 20 small kernels (~35-45 us a call
on an H100 and an H200: a tenth of a DeepSeek-V3 down projection); this is one launch. Imported only by generated
code, on a CUDA device (the CPU tests run it under the Triton interpreter)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specgen.runtime.grouped_jax import ROW_ALIGN, row_visits_bound


@triton.jit
def _metadata(index, offsets_out, groups_out, lo_out, used_out, G, rows, visits,
              BLOCK_M: tl.constexpr, ALIGN: tl.constexpr, FROM_OFFS: tl.constexpr, VISIT_TAIL: tl.constexpr,
              BLOCK_G: tl.constexpr, BLOCK_V: tl.constexpr):
    # Every program derives the segments' row spans from the index (G values: cheaper than a second launch), then
    # answers its BLOCK_V visits: which segment each serves (a compare-and-count over the segments, searchsorted's
    # right side) and the first row it stores (the segment's values gathered). Sums run in 64 bits: int32 sizes summed past 2^31 stay ordered.
    g = tl.arange(0, BLOCK_G)
    is_group = g < G
    x = tl.load(index + g, mask=is_group, other=0).to(tl.int64)
    if FROM_OFFS:  # sizes as differences of cumulative ends, group 0 from row 0 (sizes_from_offs)
        x -= tl.load(index + g - 1, mask=is_group & (g > 0), other=0).to(tl.int64)
    size = tl.maximum(x, 0)
    total = tl.cumsum(size, 0)
    ends = tl.minimum(total, rows)  # groups' ends clamped to [0, rows]: rows past M are dropped
    starts = tl.minimum(total - size, rows)  # lanes past G: empty, at the last group's end
    if tl.program_id(0) == 0:
        tl.store(offsets_out + g + 1, ends.to(tl.int32), mask=is_group)
        tl.store(offsets_out + g, tl.zeros([BLOCK_G], tl.int32), mask=g == 0)
    if VISIT_TAIL:  # the tail's rows [offsets[G], rows): segment G
        ends = tl.where(g == G, rows, ends)
    # Past the clamp every value fits 32 bits (rows < 2^31): the visit x segment work below runs in int32.
    starts, ends = starts.to(tl.int32), ends.to(tl.int32)
    base = starts // ALIGN * ALIGN
    span = tl.where(ends > starts, (ends - base + BLOCK_M - 1) // BLOCK_M, 0)  # visits of each segment
    span_ends = tl.cumsum(span, 0)
    real = tl.sum(span, 0)
    if tl.program_id(0) == 0:
        tl.store(used_out, real)

    v = tl.program_id(0) * BLOCK_V + tl.arange(0, BLOCK_V)
    segment = tl.sum((span_ends[None, :] <= v[:, None]).to(tl.int32), 1)
    which = tl.minimum(segment, BLOCK_G - 1)  # a gather's index stays in the block (visits past `real` drop it)
    nominal = tl.gather(base - (span_ends - span) * BLOCK_M, which, 0) + v * BLOCK_M
    is_real = v < real
    lo = tl.where(is_real, tl.maximum(tl.gather(starts, which, 0), nominal), rows)
    group = tl.where(is_real, tl.minimum(segment, G), G)
    tl.store(lo_out + v, lo, mask=v < visits)
    tl.store(groups_out + v, group, mask=v < visits)


def group_row_starts(index: torch.Tensor, rows: int, block_m: int, visit_tail: bool,
                     from_offs: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(offsets (G + 1,), group of each visit (V,), first row each visit stores (V,), the visits that store rows
    (1,)), int32 on `index`'s device, as
    runtime/grouped_jax.py's `group_row_starts` of the sizes (`from_offs`: of `index`'s differences,
    torch._grouped_mm's cumulative ends). G >= 1."""
    groups = index.shape[0]
    visits = row_visits_bound(rows, groups, block_m, visit_tail)
    offsets = torch.empty(groups + 1, dtype=torch.int32, device=index.device)
    group = torch.empty(visits, dtype=torch.int32, device=index.device)
    lo = torch.empty(visits, dtype=torch.int32, device=index.device)
    used = torch.empty(1, dtype=torch.int32, device=index.device)
    block_g = triton.next_power_of_2(groups + 1)  # the groups and the tail's segment
    # the visit x segment compare stays ~4K elements a program: its code is unrolled (a first form with three such
    # passes in int64 ran 28 us a call at 32 groups on an H200; this one compiles to ~2,900 SASS lines there)
    block_v = max(16, min(128, 4096 // block_g))
    _metadata[(max(1, triton.cdiv(visits, block_v)),)](
        index, offsets, group, lo, used, groups, rows, visits, BLOCK_M=block_m, ALIGN=ROW_ALIGN, FROM_OFFS=from_offs,
        VISIT_TAIL=visit_tail, BLOCK_G=block_g, BLOCK_V=block_v)
    return offsets, group, lo, used
