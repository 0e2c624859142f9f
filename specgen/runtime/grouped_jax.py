"""What the grouped kind's JAX entries import beside specgen/runtime/jax.py: the trace-time checks of the group
index, of a per-group operand and of a caller's `out` (errors name the kernel and the argument), and the group
metadata a Pallas grouped kernel reads (the TPU one scalar-prefetches it), computed on the device from the group sizes (jit-able,
static shapes: new sizes of the same shapes reuse the compiled kernel). Imported only by generated code."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def group_index(fn: str, name: str, x: Any, groups: int, what: str) -> jax.Array:
    """The group index: a jax.Array of int32, one value per group of b (`what`: cumulative ends or sizes)."""
    if not isinstance(x, jax.Array):
        raise TypeError(f"{fn}: argument '{name}' must be a jax.Array of int32 {what}, got {type(x).__name__}")
    if x.dtype != jnp.int32:
        raise TypeError(f"{fn}: argument '{name}' is {x.dtype}, expected int32 ({what}, as jax.lax.ragged_dot's "
                        "group_sizes)")
    if tuple(x.shape) != (groups,):
        raise ValueError(f"{fn}: argument '{name}' has shape {tuple(x.shape)}, expected ({groups},): one value per "
                         f"group of b (G = b.shape[0] = {groups})")
    return x


def group_rows(fn: str, name: str, x: Any, dtype: Any, groups: int, n: int) -> jax.Array:
    """An operand indexed by group, (G, N) (row g serves group g), returned as (G, 1, N): its BlockSpec takes one
    group's (1, block_n) row, whose last two dims are then a full dim and a lane-aligned block."""
    want = f"(G, N) = ({groups}, {n}) {jnp.dtype(dtype)}, one row per group"
    if not isinstance(x, jax.Array):
        raise TypeError(f"{fn}: argument '{name}' must be a jax.Array {want}, got {type(x).__name__}")
    if x.dtype != jnp.dtype(dtype):
        raise TypeError(f"{fn}: argument '{name}' is {x.dtype}, expected {jnp.dtype(dtype)} ({want})")
    if tuple(x.shape) != (groups, n):
        raise ValueError(f"{fn}: argument '{name}' has shape {tuple(x.shape)}, expected {want}")
    return x.reshape(groups, 1, n)


def output(fn: str, x: Any, dtype: Any, shape: tuple[int, int]) -> None:
    """A caller's `out`: a jax.Array of the result's dtype and shape (the result aliases it)."""
    want = f"{shape} {jnp.dtype(dtype)}, the result's shape and dtype"
    if not isinstance(x, jax.Array):
        raise TypeError(f"{fn}: argument 'out' must be a jax.Array {want} or None, got {type(x).__name__}")
    if x.dtype != jnp.dtype(dtype) or tuple(x.shape) != tuple(shape):
        raise ValueError(f"{fn}: argument 'out' is {tuple(x.shape)} {x.dtype}, expected {want}")


def sizes_from_offs(offs: jax.Array) -> jax.Array:
    """Group sizes from cumulative ends (torch._grouped_mm's offs, group 0 from row 0), on the device."""
    return jnp.diff(offs, prepend=jnp.zeros((1,), offs.dtype))


def tiles_bound(rows: int, groups: int, block_m: int) -> int:
    """The grid's static bound on tile visits: each of the cdiv(rows, block_m) row tiles once, plus one more
    visit for each group boundary that falls inside a tile (at most G - 1 of them)."""
    return -(-rows // block_m) + groups - 1


def group_metadata(sizes: jax.Array, rows: int, block_m: int, visit_tail: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(offsets (G + 1,), group of each visit (V,), row tile of each visit (V,)), V = `tiles_bound`, int32: the
    Pallas TPU kernel's visits (its BlockSpecs take whole row tiles).

    Group g holds rows [offsets[g], offsets[g + 1]); a negative size counts as 0 and rows past `rows` are
    dropped (the groups' ends are clamped to [0, rows] on the device, as jax.lax.ragged_dot's mask drops them), so
    every visit's tile is in range whatever the sizes. Visits walk the groups in order, each the row tiles its
    rows touch, so a tile shared by k groups is visited k times in a row. The visits left over are marked with
    group G (no group: the kernel computes nothing there): with `visit_tail` they first take the tiles wholly past
    the last group, one each (visited only so that the kernel writes those rows: zeros, or the caller's `out`; there
    are never more of them than visits left over), then repeat the last tile (visiting it again writes nothing
    and fetches no new output block)."""
    groups = sizes.shape[0]
    tiles = -(-rows // block_m)
    visits = tiles_bound(rows, groups, block_m)
    offsets = _offsets(sizes, rows)
    starts, ends = offsets[:-1], offsets[1:]
    first = starts // block_m
    span = jnp.where(ends > starts, (ends - 1) // block_m - first + 1, 0)  # row tiles each group's rows touch
    span_ends = jnp.cumsum(span)
    real = span_ends[-1]  # visits that belong to a group
    v = jnp.arange(visits, dtype=jnp.int32)
    group = _segment_of(span_ends, v)
    g = jnp.minimum(group, groups - 1)
    tile = first[g] + v - (span_ends[g] - span[g])
    used = -(-ends[-1] // block_m)  # row tiles holding some group's rows
    spare = jnp.minimum(used + v - real, tiles - 1) if visit_tail else jnp.full_like(v, jnp.maximum(used - 1, 0))
    tile = jnp.where(v < real, tile, spare).astype(jnp.int32)
    group = jnp.where(v < real, group, groups).astype(jnp.int32)
    return offsets, group, tile


# Mosaic GPU copies through GMEM views tiled in 8 rows (runtime/mgpu.py `tma_extent`): a TMA box of A's rows starts
# on a multiple of 8, not at any group's first row.
ROW_ALIGN = 8


def row_visits_bound(rows: int, groups: int, block_m: int, visit_tail: bool) -> int:
    """The static bound on `group_row_starts`' visits: segments (the groups, and the tail's rows with
    `visit_tail`) of x_s rows from an 8-row boundary take sum cdiv(x_s, block_m) <= cdiv(sum x_s, block_m) +
    segments - 1 visits, and sum x_s <= rows + 7 (segments - 1) (the first segment starts at row 0)."""
    segments = groups + (1 if visit_tail else 0)
    return -(-(rows + (ROW_ALIGN - 1) * (segments - 1)) // block_m) + segments - 1


def group_row_starts(sizes: jax.Array, rows: int, block_m: int,
                     visit_tail: bool) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(offsets (G + 1,), group of each visit (V,), first row each visit stores (V,), the visits that store rows
    (1,)), V = `row_visits_bound`, int32: the Mosaic GPU kernel's visits, each block_m rows from its group's first
    row (rounded down to ROW_ALIGN rows), so a tile holds one group's rows and no tile is computed twice for two
    groups (as `group_metadata`'s row tiles a boundary splits are): fewer visits where group sizes are no multiple
    of block_m (DeepSeek-V3 up with skewed sizes: 47 against 56).

    Offsets as `group_metadata`'s (clamped to [0, rows]). Visit j of a group of rows [s, e) stores rows [lo, hi) =
    [max(s, b + j block_m), min(e, b + j block_m + block_m)), b = s rounded down to ROW_ALIGN; the kernel derives
    its nominal first row b + j block_m as lo rounded down to ROW_ALIGN, and hi from it. With `visit_tail` the rows
    past the last group, [offsets[G], rows), are walked the same way as one more segment (group G: zeros stored).
    The visits left over come last, marked group G with lo = rows (nothing to store); the count of the others lets
    the kernel walk them first (its grid then spreads them evenly: the left-over ones inside the last band of
    visits had some CTAs idle while others ran their last tiles)."""
    groups = sizes.shape[0]
    visits = row_visits_bound(rows, groups, block_m, visit_tail)
    offsets = _offsets(sizes, rows)
    starts, ends = offsets[:-1], offsets[1:]
    if visit_tail:  # the tail's rows: segment G
        starts = jnp.concatenate([starts, offsets[-1:]])
        ends = jnp.concatenate([ends, jnp.full((1,), rows, jnp.int32)])
    base = starts // ROW_ALIGN * ROW_ALIGN
    span = _segment_visits(starts, ends, block_m)
    span_ends = jnp.cumsum(span)
    real = span_ends[-1]
    v = jnp.arange(visits, dtype=jnp.int32)
    segment = jnp.minimum(_segment_of(span_ends, v), starts.shape[0] - 1)
    lo = jnp.maximum(starts[segment], base[segment] + (v - (span_ends[segment] - span[segment])) * block_m)
    lo = jnp.where(v < real, lo, rows).astype(jnp.int32)
    group = jnp.where(v < real, jnp.minimum(segment, groups), groups).astype(jnp.int32)
    return offsets, group, lo, real.reshape(1).astype(jnp.int32)


def serving_visits(used: jax.Array, tail_start: jax.Array, rows: int, block_m: int) -> jax.Array:
    """Of `group_row_starts`' `used` storing visits with `visit_tail`, those that serve a group (they come first): the
    tail's segment [tail_start, rows) takes cdiv(rows - b, block_m) visits from b = tail_start rounded down to
    ROW_ALIGN, none when empty. Scalar jnp ops: the Mosaic GPU kernel's split last wave evaluates it on the device."""
    return used - _segment_visits(tail_start, rows, block_m)


def _segment_visits(starts: jax.Array, ends: jax.Array | int, block_m: int) -> jax.Array:
    """Visits of the segments [starts, ends): block_m rows each from the start rounded down to ROW_ALIGN, none for
    an empty segment (`group_row_starts`' spans, and the tail's in `serving_visits`)."""
    return jnp.where(ends > starts, -(-(ends - starts // ROW_ALIGN * ROW_ALIGN) // block_m), 0)


def _offsets(sizes: jax.Array, rows: int) -> jax.Array:
    """The groups' cumulative ends from 0, negative sizes as 0, clamped to [0, rows] (G + 1,) int32."""
    ends = jnp.minimum(jnp.cumsum(jnp.maximum(sizes, 0)), rows).astype(jnp.int32)
    return jnp.concatenate([jnp.zeros((1,), jnp.int32), ends])


def _segment_of(span_ends: jax.Array, v: jax.Array) -> jax.Array:
    """Which segment each visit falls in (searchsorted's right side, int32). compare_all: one fused
    compare-and-count (V x G); the default binary search is a while loop, which XLA on a GPU runs as a few tiny
    kernels an iteration (~20 us a call at 32 groups, measured on an H100)."""
    return jnp.searchsorted(span_ends, v, side="right", method="compare_all").astype(jnp.int32)


def k_group_metadata(sizes: jax.Array, k: int, block_k: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ragged-K kernel's metadata (groups along K, the weight gradient; megablox's `tgmm` with its empty groups
    visited): (offsets (G + 1,), group of each visit (V,), K tile of each visit (V,)), V = `tiles_bound(k, G,
    block_k)`, int32.

    Group g holds K rows [offsets[g], offsets[g + 1]), the ends clamped to [0, k] as `group_metadata`'s. Visits walk
    the groups in order, each the K tiles its rows touch, an empty group one visit (so that its out[g] is written:
    the epilogue of zeros), so every group's visits follow each other and out[g]'s block is stored once, at its
    last. They fit V: the non-empty groups touch at most cdiv(k, block_k) tiles plus one for each boundary inside a
    tile (at most their count - 1), the empty ones one each, G - 1 more in all (G with none non-empty, and k >= 1).
    The visits left over are marked with group G (no group: the kernel computes and stores nothing) and repeat the
    last real visit's K tile (no new block fetched)."""
    groups = sizes.shape[0]
    visits = tiles_bound(k, groups, block_k)
    offsets = _offsets(sizes, k)
    starts, ends = offsets[:-1], offsets[1:]
    first = jnp.minimum(starts // block_k, -(-k // block_k) - 1)  # an empty group at k: the last tile (unread)
    span = jnp.where(ends > starts, (ends - 1) // block_k - starts // block_k + 1, 1)
    span_ends = jnp.cumsum(span)
    real = span_ends[-1]
    v = jnp.arange(visits, dtype=jnp.int32)
    group = _segment_of(span_ends, v)
    g = jnp.minimum(group, groups - 1)
    tile = first[g] + v - (span_ends[g] - span[g])
    tile = jnp.where(v < real, tile, tile[jnp.maximum(real - 1, 0)]).astype(jnp.int32)
    group = jnp.where(v < real, group, groups).astype(jnp.int32)
    return offsets, group, tile


def interpreted_under_shard_map(varying: frozenset, interpret: object) -> bool:
    """Whether a grouped TPU pallas_call runs in Pallas's plain (HLO) interpreter under `jax.shard_map` with
    check_vma (`varying`: the mesh axes its arguments vary over): its kernel then runs a visit's math inside a
    pl.when and its index maps go through `index_maps_in_branches`."""
    return bool(varying) and interpret is True


def index_maps_in_branches(on: bool, in_specs: list, out_spec: Any) -> tuple[list, Any]:
    """With `on` (`interpreted_under_shard_map`): every BlockSpec's index map computed inside a `lax.cond` on its
    first grid index (always true); otherwise unchanged (a native TPU call, or no vma typing: check_vma=False).

    Pallas traces index maps and kernels with check_vma off (every value typed as not varying), and jax 0.10's HLO
    interpreter evaluates them primitive by primitive on values typed as the call's arguments vary: the
    scalar-prefetched group metadata varies over the mesh (each shard's group sizes), the grid indices do not, so
    `groups[v]`, a dynamic slice of one by the other, is refused ("Primitive dynamic_slice requires varying manual
    axes to match"). A cond's branch is lowered as traced, its operands not checked against each other (as the dense
    TPU kernels' pl.when steps): the same values, computed inside one."""
    if not on:
        return in_specs, out_spec
    import dataclasses

    def index_map(fn: Any) -> Any:
        def branch(*ix: Any) -> Any:
            return jax.lax.cond(ix[0] >= 0, lambda: fn(*ix), lambda: fn(*ix))
        return branch

    def spec(s: Any) -> Any:
        return s if getattr(s, "index_map", None) is None else dataclasses.replace(s, index_map=index_map(s.index_map))

    return [spec(s) for s in in_specs], spec(out_spec)
