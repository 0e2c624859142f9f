"""The CuTe sm90 kernel's SMEM struct (templates/gemm/cute/*sm90*.jinja's SharedStorage), to the byte: the design's
`memory` plans a spec's with it, and `row_smem` a module's Config row's (a bench's candidate rows set over a planned
one: bench/cute_train_tiles.py), so the two cannot drift. The dense CuTe sm100 design shares the alignment figures."""

from __future__ import annotations

from typing import Any

from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm.designs.cute_sm90 import training as trn

ALIGN = 1024  # every SMEM buffer of the struct starts on a 1024-byte boundary (128B swizzle atom x 8 rows)
MBARRIER_BYTES = 8
BASE_ALIGN_PAD = 1024  # static SMEM the compiler places before the 1024-aligned dynamic struct


def align_up(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


def smem_struct(capacity: int, tile: tuple[int, int, int], dtype_bytes: tuple[int, int, int], ab_stages: int,
                epilogue: tuple[int, int, int], pingpong: bool, split_k: int = 1, acc_bytes: int = 4,
                gated: bool = False) -> tuple[MemoryBudget, int]:
    """The SharedStorage struct the template declares, to the byte, and its mbarriers' bytes: 2 x ab_stages mbarriers
    (+ 2 ping-pong order barriers, + 2 split-K handoff barriers), then A, B (a gated B's up tile too: its own
    1024-aligned buffer, sU, tile.n x tile.k) and epilogue buffers (two sets when ping-pong), split-K's partials, each
    1024-aligned; plus the 1024 bytes of static SMEM the compiler puts before it so the dynamic base meets the
    struct's 1024-byte alignment (`.nv.shared.<kernel>` in the cubin). `tile` (m, n, k) and `dtype_bytes` (A, B, out)
    are the spec's, `epilogue` the subtile and its stages (epi_m, epi_n, epi_stages). A/B stages are multiples of 1024
    for every tile wgmma takes."""
    (m, n, k), (a, b, out), (em, en, stages) = tile, dtype_bytes, epilogue
    epi = align_up((2 if pingpong else 1) * stages * em * en * out)  # ping-pong: one set of subtiles per warpgroup
    order = 2 * MBARRIER_BYTES if pingpong else 0  # ping-pong: whose turn at the mainloop
    barriers = 2 * ab_stages * MBARRIER_BYTES + order + (2 * MBARRIER_BYTES if split_k > 1 else 0)  # split-K: landed / read
    partials = align_up((split_k - 1) * m * n * acc_bytes)  # split-K: the others' f32 tiles to split 0
    return MemoryBudget("SMEM", capacity, BASE_ALIGN_PAD + align_up(barriers), m * k * a + n * k * b * (2 if gated else 1),
                        ab_stages, epi, epilogue_overlaps_ab=False, extra_bytes=partials,
                        extra_label="split-K partials"), barriers


def row_smem(row: Any, capacity: int, dtype_bytes: tuple[int, int, int] = (2, 2, 2), gated: bool = False) -> MemoryBudget:
    """The struct a module's Config row declares (its kernel tile, stages, epilogue subtiles, schedule, split-K and dOut
    ring buffers; fields a training module's row lacks: none), as `memory` plans it: for a row whose fields were set
    over a planned one's (bench/cute_train_tiles.py's candidates)."""
    swap, split = getattr(row, "swap_ab", False), getattr(row, "split_k", 1)
    m, n = (row.tile_n, row.tile_m) if swap else (row.tile_m, row.tile_n)  # the spec's tile: the kernel's swapped
    budget, barriers = smem_struct(capacity, (m, n, row.tile_k), dtype_bytes, row.ab_stages,
                                   (row.epi_m, row.epi_n, row.epi_stages), row.pingpong, split, gated=gated)
    return trn.ring_of(budget, getattr(row, "dout_stages", 0), row.epi_m * row.epi_n * dtype_bytes[2], barriers,
                       BASE_ALIGN_PAD, row.pingpong)
