"""Tiny helpers the generated Mosaic GPU (pallas:gpu_sm90) modules import: the device query, the
padding that TMA's tiled GMEM view needs, and the epilogue's vector loads. Imported only by generated
code; jax's Mosaic GPU API is read once here so that the modules render the same text for every jax
they run under (0.10 on CI, 0.11 on the H200)."""

from __future__ import annotations

import inspect
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

# jax 0.10's plgpu.load takes the index positionally (required); 0.11 deprecates it for `ref.at[...]`.
_LOAD_TAKES_INDEX = inspect.signature(plgpu.load).parameters["idx"].default is inspect.Parameter.empty


def on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def require_gpu(fn: str) -> None:
    """Raise (before anything is traced) where no CUDA device runs the kernel: Mosaic GPU has no CPU path here."""
    if not on_gpu():
        raise RuntimeError(f"{fn}: Mosaic GPU kernels run on an sm90 CUDA device; jax's default backend is "
                           f"{jax.default_backend()!r}")


def num_sms(default: int) -> int:
    """The SM count of the device the call runs on (the persistent grid's size); `default` where jax
    sees no GPU (lowering for CUDA on a CPU machine)."""
    device = jax.devices()[0]
    return int(getattr(device, "core_count", 0) or default) if device.platform == "gpu" else default


def round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def tma_extent(extent: int, tile: int, minimum: int) -> int:
    """The extent a TMA-copied dim must have. Mosaic GPU views GMEM in (8 x swizzle) tiles and takes a
    dim that is either within one tile or a whole number of them (jax `mosaic/gpu/launch_context.py`,
    TileTransform); a contiguous dim also spans a multiple of 16 bytes (`minimum` elements: TMA's
    global strides, cuTensorMapEncodeTiled). Anything else is zero-padded up (a copy; aligned shapes
    copy nothing)."""
    if extent > tile and extent % tile:
        return round_up(extent, tile)
    return round_up(max(extent, minimum), minimum)


def pad(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Zero-pad `x` at the end of each dim to `shape` (no-op, no copy, where it already has it)."""
    if tuple(x.shape) == tuple(shape):
        return x
    return jnp.pad(x, [(0, s - d) for d, s in zip(x.shape, shape, strict=True)])


def load(ref: Any, layout: Any) -> jax.Array:
    """A vector from GMEM into registers in `layout` (plain loads: the vector is not TMA-staged)."""
    if _LOAD_TAKES_INDEX:
        return plgpu.load(ref, (), layout=layout, optimized=False)
    return plgpu.load(ref, layout=layout, optimized=False)


def cols(ref: Any, start: Any, rows: int, width: int) -> jax.Array:
    """`width` elements of a per-column vector from `start`, as f32, broadcast down `rows` rows in the
    wgmma accumulator's layout."""
    v = load(ref.at[pl.ds(start, width)], plgpu.Layout.WGMMA.reduce(0)).astype(jnp.float32)
    return lax.broadcast_in_dim(v, (rows, width), (1,))


def rows(ref: Any, start: Any, height: int, width: int) -> jax.Array:
    """`height` elements of a per-row vector from `start`, as f32, broadcast across `width` columns."""
    v = load(ref.at[pl.ds(start, height)], plgpu.Layout.WGMMA.reduce(1)).astype(jnp.float32)
    return lax.broadcast_in_dim(v, (height, width), (0,))


def along_n(ref: Any, start: Any, cfg: Any) -> jax.Array:
    """A per-column (N) vector's slice for one epilogue subtile, in the subtile's orientation: across
    out's epi_m x epi_n subtile, or down out^T's epi_n x epi_m one where `cfg` swaps A and B."""
    if cfg.swap_ab:
        return rows(ref, start, cfg.epi_n, cfg.epi_m)
    return cols(ref, start, cfg.epi_m, cfg.epi_n)


def along_m(ref: Any, start: Any, cfg: Any) -> jax.Array:
    """A per-row (M) vector's slice for one epilogue subtile, in the subtile's orientation (`along_n`)."""
    if cfg.swap_ab:
        return cols(ref, start, cfg.epi_n, cfg.epi_m)
    return rows(ref, start, cfg.epi_m, cfg.epi_n)


def staged(ref: Any, cfg: Any) -> jax.Array:
    """The subtile staged in an output slot (a residual's, TMA-loaded in out's orientation) as f32, in the
    epilogue's orientation: as stored, or read through the slot's transposed view into the accumulator's
    layout where `cfg` swaps A and B (out^T's subtile)."""
    if cfg.swap_ab:
        return plgpu.layout_cast(ref.T[...], plgpu.Layout.WGMMA).astype(jnp.float32)
    return ref[...].astype(jnp.float32)


def transforms(dtype: Any, swizzle: int) -> tuple[Any, ...]:
    """The SMEM layout of a staged tile: (8 rows x `swizzle` bytes) tiles, swizzled, the layout wgmma and
    TMA share (the plan chose `swizzle` from the tile's contiguous extent, as `plgpu.find_swizzle` does)."""
    return (plgpu.TilingTransform((8, swizzle // jnp.dtype(dtype).itemsize)), plgpu.SwizzleTransform(swizzle))
