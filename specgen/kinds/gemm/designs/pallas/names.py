"""The identifiers the Pallas design's modules use (templates/gemm/pallas/, TPU and Mosaic GPU)."""

from __future__ import annotations

# Names its modules bind or read at their top level (a kernel's name must not replace one).
MODULE_NAMES: frozenset[str] = frozenset({
    "functools", "jax", "jnp", "lax", "pl", "pltpu", "_rt", "NAME", "AB_BUFFERS", "VMEM_LIMIT_BYTES", "BLOCK_M",
    "BLOCK_N", "BLOCK_K", "_kernel", "_build", "_call", "plgpu", "_mg", "min", "max", "WARPGROUPS",
    # Mosaic GPU: its configs (the default and each size-selected variant) and the launcher picking one
    "NamedTuple", "Config", "CONFIG", "VARIANT_CONFIGS", "_config_for", "_launch",
    # Mosaic GPU's torch entry: TMA's extents and the direct launch (specgen/runtime/mgpu_torch.py)
    "_extents", "_direct", "_DIRECT", "_mt", "dict", "frozenset", "object", "str", "tuple",
    # a TPU backward (training): its table, kernels, builders and the custom_vjp's rules
    "OPERAND", "TRAIN_GEMMS", "_backward_gemm", "_dims", "_dot_step", "_train_gemm_kernel", "_grad_cols",
    "_train_cols_kernel", "_last_step", "_train_pre_kernel", "_train_recompute_kernel", "_train", "_train_bwd",
    "_train_fwd",
    # Mosaic GPU's gated epilogue: B's view with a gate / up axis; the TPU kernel's N-major gated B: its blocks along N
    "_gated_shape", "_gated_view", "N_BLOCKS",
    # a Mosaic GPU backward (training): the roles' kernel, its builder and TMA's extents (and `_gemm`, the call)
    "_train_kernel", "_train_build", "_train_extents", "_gemm",
    # ... its preact G and bias gradient (one Pallas Triton kernel) and the gated roles' slicing
    "COLS_BLOCK", "_grad_cols_kernel", "pltriton", "slice",
    # a TPU backward of the other chains (training): its jnp pass (templates/gemm/pallas/chain_backward.jinja)
    "_chain_grads",
    # a batched forward's backward (training, batch = true; templates/gemm/pallas/batch_backward.jinja): a TPU backward
    # GEMM's every batch entry in one pallas_call
    "_entries", "_every_entry",
    # a training module's differentiable torch entry (templates/gemm/pallas/torch_grad.jinja; runtime/jax_torch.py)
    "_TORCH_ENTRY", "_torch_entry", "jax_torch",
})

# Every other identifier its code uses (an epilogue argument's names must avoid them).
RESERVED: frozenset[str] = frozenset({
    "up_acc_ref", "call", "gated",  # the TPU kernel's gated epilogue (up_ref, up: below)
    "a_ref", "b_ref", "out_ref", "acc_ref", "_init", "_epilogue", "valid", "k_total", "block_k", "m", "n", "blk_m",
    "blk_n", "blk_k", "grid", "in_specs", "out_shape", "out_specs", "bb", "i", "j", "b_shape", "varying", "mode",
    "interpret", "transpose", "int", "object", "frozenset", "name", "pallas", "tpu", "memory_space",
    "scratch_shapes", "compiler_params", "dimension_semantics", "vmem_limit_bytes", "cost_estimate", "flops",
    "transcendentals", "bytes_accessed", "preferred_element_type", "static_argnames", "a_gmem", "b_gmem", "out_gmem",
    "a_smem", "b_smem", "out_smem", "a_spec", "b_spec", "a_op", "b_op", "a_first", "b_first", "a_view", "b_view",
    "out_view", "_acc", "_scope", "_tile", "allocations", "bi", "body", "col0", "row0", "context", "ej", "ignore",
    "info", "k_steps", "kk", "lin", "m_tiles", "n_tiles", "mi", "ni", "mma", "out_cols", "out_rows", "n_pad",
    "res_barrier", "run_pipeline", "sms", "wg", "wg_cols", "mgpu", "mosaic_gpu", "collective_axes",
    "approx_math", "compute_context", "delay_release", "grid_names", "lowering_semantics", "max_concurrent_steps",
    "memory_registers", "num_barriers", "num_compute_wgs", "out_type", "thread_name", "transforms", "wait_read_only",
    "wg_axis", "cta", "cluster", "cluster_names", "acc", "ei", "k", "num_threads", "pipeline", "slot", "tiles", "x",
    "bool", "typing", "cfg", "config", "a_shared", "b_shared",
    "a_ext", "b_ext", "out_ext", "kernel", "launch", "mgpu_torch", "structs",
    # a swapped config's kernel (pallas.swap_ab): the accumulator's shape, the subtile cast for its transposed store
    "acc_shape", "y",
    # a gated epilogue's (Mosaic GPU): B's 2N columns, the up tile, its accumulator and subtile
    "n2", "dims", "up_smem", "accs", "up_ref", "up",
    # the Config fields (attributes, but also the NamedTuple's class-body names)
    "tile_m", "tile_n", "tile_k", "stages", "wgmma_in_flight", "wg_n", "epi_m", "epi_n", "out_slots",
    "residual_barriers", "a_swizzle", "b_swizzle", "out_swizzle", "group_m", "raster_dim", "persistent", "cluster_m",
    "cluster_n", "smem_bytes", "swap_ab",
    # the TPU kernel's K steps (each in a pl.when), and a backward's (training): its kernels' refs and locals
    "accumulate", "masked", "last", "block_r", "bp", "bq", "br", "c_dtype", "dbias_ref", "dot",
    "dout_ref", "g_ref", "keepdims", "m_total", "nondiff_argnums", "p_dim", "q_dim", "r_dim", "c_block", "pre_ref", "r_total", "saved",
    "scratch", "src_ref", "step", "sum_ref", "vmem_limit", "x_axis", "x_major", "x_ref", "y_axis", "y_major",
    "y_ref", "block", "block_m", "da", "db", "g", "grad", "pre", "role", "a", "b",
    # a Mosaic GPU backward's kernel (training): its operands, majors, staging and stores, and its call's padding
    "acc_x", "args", "aux_barrier", "c_ext", "dout_gmem", "ext", "extra", "m_pad", "outs", "part", "ref", "slot_shape",
    "stores", "transposed", "view", "x_ext", "x_gmem", "x_k", "x_op", "x_smem", "x_spec", "x_tile", "y_ext", "y_gmem",
    "y_k", "y_op", "y_smem", "y_spec", "y_tile", "zeros",
    # ... a gated epilogue's (pre / G halves, the gate and up tiles) and the G / bias-gradient kernel's
    "dgate", "dout", "dup", "full", "gate_ref", "inside", "num_warps", "shapes", "sums_ref", "up_acc", "which", "ys", "ys_accs",
    # a TPU gated backward's (training): B's and pre / G's halves as a leading block dim, dgrad's and wgrad's folded grids
    "acc_refs", "half", "halved", "major", "outer", "ps", "qs", "rs", "squeezed", "tail", "x_plain", "y_plain", "y_refs",
    # a TPU fp8 forward's backward (training): dgrad's and wgrad's G (U scale_b, scale_a U), their refs, the conversion
    "g_b", "g_a", "gb_ref", "ga_ref", "convert",
    # ... and a Mosaic GPU one's: U (jnp) and the element sizes of the TMA extents (the 8-bit pre GEMM, its f32 pre)
    "u", "size", "c_size",
    # ... and the other chains' jnp pass: the inputs of the ops it replays from pre
    "xs",
    # ... and a batched forward's (batch_backward.jinja, backward_mgpu.jinja): a batch entry's block or view
    "entry",
    # ... and the differentiable torch entry's (torch_grad.jinja): the Entry's keyword
    "fp8",
})

# How its templates derive names from an epilogue argument `x`.
ARG_DERIVED: tuple[str, ...] = ("{}_ref", "{}_gmem", "{}_view")
