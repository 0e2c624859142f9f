"""The identifiers the Pallas design's modules use (templates/pallas/, TPU and Mosaic GPU)."""

from __future__ import annotations

# Names its modules bind or read at their top level (a kernel's name must not replace one).
MODULE_NAMES: frozenset[str] = frozenset({
    "functools", "jax", "jnp", "lax", "pl", "pltpu", "_rt", "NAME", "AB_BUFFERS", "VMEM_LIMIT_BYTES", "_kernel",
    "_build", "_call", "plgpu", "_mg", "STAGES", "WGMMA_IN_FLIGHT", "WARPGROUPS", "WG_N", "OUT_SLOTS", "A_SWIZZLE",
    "B_SWIZZLE", "OUT_SWIZZLE", "SMEM_BYTES", "min", "max", "TILE_M", "TILE_N", "TILE_K", "EPI_M", "EPI_N",
    "PERSISTENT", "CLUSTER_M", "CLUSTER_N", "RASTER_DIM"
})

# Every other identifier its code uses (an epilogue argument's names must avoid them).
RESERVED: frozenset[str] = frozenset({
    "a_ref", "b_ref", "out_ref", "acc_ref", "_init", "_epilogue", "valid", "k_total", "block_k", "m", "n", "blk_m",
    "blk_n", "blk_k", "grid", "in_specs", "out_shape", "out_specs", "bb", "i", "j", "b_shape", "varying", "mode",
    "interpret", "transpose", "int", "object", "frozenset", "name", "pallas", "tpu", "memory_space",
    "scratch_shapes", "compiler_params", "dimension_semantics", "vmem_limit_bytes", "cost_estimate", "flops",
    "transcendentals", "bytes_accessed", "preferred_element_type", "static_argnames", "a_gmem", "b_gmem", "out_gmem",
    "a_smem", "b_smem", "out_smem", "a_spec", "b_spec", "a_op", "b_op", "a_first", "b_first", "a_view", "b_view",
    "out_view", "_acc", "_scope", "_tile", "allocations", "bi", "body", "col0", "row0", "context", "ej", "ignore",
    "info", "k_steps", "kk", "lin", "m_tiles", "n_tiles", "mi", "ni", "mma", "out_cols", "out_rows", "n_pad",
    "res_barrier", "run_pipeline", "sms", "wg", "wg_cols", "mgpu", "mosaic_gpu", "collective_axes",
    "compute_context", "delay_release", "grid_names", "lowering_semantics", "max_concurrent_steps",
    "memory_registers", "num_barriers", "num_compute_wgs", "out_type", "thread_name", "transforms", "wait_read_only",
    "wg_axis", "cta", "cluster", "cluster_names"
})

# How its templates derive names from an epilogue argument `x`.
ARG_DERIVED: tuple[str, ...] = ("{}_ref", "{}_gmem", "{}_view")
