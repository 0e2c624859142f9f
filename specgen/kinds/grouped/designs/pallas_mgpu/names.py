"""The identifiers the grouped Pallas Mosaic GPU design's modules use (templates/grouped/pallas/grouped_mgpu.py.jinja
and the host macros it imports)."""

from __future__ import annotations

# Names its modules bind or read at their top level (a kernel's name must not replace one).
MODULE_NAMES: frozenset[str] = frozenset({
    "functools", "jax", "jnp", "lax", "pl", "plgpu", "_rt", "_gj", "_mg", "NAME", "WARPGROUPS", "TAIL_ZERO",
    "NamedTuple", "Config", "CONFIG", "VARIANT_CONFIGS", "_config_for", "_kernel", "_build", "_launch", "_call",
    "_extents", "_DIRECT", "_direct", "_gm", "_mt", "min", "max", "bool",
    "tuple",
    # a gated epilogue's B view (gate / up axis)
    "_gated_shape", "_gated_view",
    # the ragged-K module's (groups along K): each group's K tiles, its offsets
    "_k_tiles", "_offsets",
    # a training module's (templates/grouped/pallas/backward_mgpu.jinja): the companions' kernels, their configs and
    # launchers, the custom_vjp and its primal
    "OPERAND", "_PRE_CONFIG", "_DGRAD_CONFIG", "_WGRAD_CONFIG", "_pre_kernel", "_pre_build", "_pre_extents", "_pre_call",
    "_dgrad_kernel", "_dgrad_build", "_dgrad_extents", "_dgrad_call", "_wgrad_kernel", "_wgrad_build",
    "_wgrad_extents", "_wgrad_call", "_train", "_train_fwd", "_train_bwd", "_forward", "_dims", "_inside",
    "_row_groups",
    # the forward's split last wave: its cap, K splits, plan and items (templates/grouped/pallas/mgpu_m.jinja)
    "TAIL_SPLIT", "_tail_splits", "_tail_plan", "_whole_tile", "_split_part", "enumerate",
    # a training module's differentiable torch entry (templates/gemm/pallas/torch_grad.jinja; runtime/jax_torch.py)
    "_TORCH_ENTRY", "_torch_entry", "jax_torch",
})

# Every other identifier its code uses (an epilogue argument's names must avoid them): the group index's argument
# names (`offs`, `group_sizes`) among them.
RESERVED: frozenset[str] = frozenset({
    "offsets_gmem", "groups_gmem", "starts_gmem", "used_gmem", "used", "live", "a_gmem", "b_gmem", "out_gmem", "a_smem", "b_smem", "out_smem",
    "acc_ref", "a_spec", "b_spec", "a_first", "b_first", "a_op", "b_op", "b_view", "allocations", "body", "cfg",
    "col0", "row0", "context", "count", "ei", "ej", "first", "g", "g_total", "group", "hi", "ignore", "info", "k",
    "k_steps", "kk", "lin", "lo", "m", "mma", "n", "n_tiles", "ni", "pipeline", "real", "rows", "run_pipeline",
    "slot", "store", "tile0", "vi", "visits", "wg", "wg_cols", "x", "x_of", "_acc", "_scope", "_tile", "_real",
    "_tail", "acc", "offsets", "groups", "starts", "sizes", "varying", "kernel", "out", "offs", "group_sizes",
    "a", "b", "a_ext", "b_ext", "out_cols", "n_pad", "sms", "config", "name", "object", "frozenset",
    "mgpu", "mosaic_gpu", "collective_axes", "compiler_params", "delay_release", "grid", "grid_names",
    "lowering_semantics", "max_concurrent_steps", "memory_registers", "num_compute_wgs", "num_threads", "out_type",
    "thread_name", "transforms", "wait_read_only", "wg_axis", "approx_math", "compute_context", "in_specs",
    "memory_space", "predicate", "static_argnames", "typing", "int", "tensors", "base",
    # the store ladder (a subtile a group boundary cuts): its boxes, committed as one bulk group
    "_ladder", "at", "commit_group",
    # a gated epilogue's: B's 2N columns, the up tile, its accumulator and subtile, the warpgroup's B half
    "n2", "smem", "dims", "warpgroup_half", "up_smem", "accs", "up_ref", "up",
    # the ragged-K kernel's: its K loops (their BlockSpecs, delays, edge tiles' masking) and launcher
    "_deep", "_edge", "_empty", "_shallow", "b_half", "delay", "edge", "ends", "idx", "in_flight", "index", "k0",
    "k_axis", "k_pad", "kt0", "specs", "steps", "zero",
    # the torch entry's direct launch
    "sb", "direct", "launch", "structs", "shape", "str", "from_offs", "grouped_metadata", "row",
    # the Config fields (attributes, but also the NamedTuple's class-body names)
    "tile_m", "tile_n", "tile_k", "stages", "wgmma_in_flight", "wg_n", "epi_m", "epi_n", "out_slots", "a_swizzle",
    "b_swizzle", "group_m", "raster_dim", "smem_bytes", "swap_ab",
    # the backward's locals and the keywords it passes (a training module's)
    "saved", "grad", "pre", "gr", "inside", "dbase", "da", "db", "tail", "result", "y", "x_ext", "y_ext",
    "out_rows", "onehot", "precision", "preferred_element_type", "side",
    # a tile's visit (the loops call it) and the forward's split last wave: the serving visits' count, the loops'
    # items, the parts' partials and semaphores
    "visit", "partials_gmem", "sems", "serving", "real_visits", "tiles_real", "rem", "parts", "items",
    "each", "split", "tile_index", "sm", "spare", "finish", "context_for", "epilogue", "_split_item", "_partial",
    "_last", "_split", "earlier", "read", "sums", "total", "which", "ways", "subtiles", "arrays", "memory_scope",
})

# How its templates derive names from an epilogue argument `x`.
ARG_DERIVED: tuple[str, ...] = ("{}_gmem", "d{}")  # d<bias>: a training module's bias gradient
