"""The identifiers the CuTe sm100 design's modules use (templates/gemm/cute/gemm_sm100.py.jinja, the shared
schedule, host, JAX and export parts): the DSL's imports, the plan's constants, the host and kernel
functions, the kernel's locals and the DSL calls' keywords."""

from __future__ import annotations

# Names its modules bind or read at their top level (a kernel's name must not replace one).
MODULE_NAMES: frozenset[str] = frozenset({
    "_fake_args", "_mkl", "_nkl", "_thread_view", "A_DTYPE", "A_LAYOUT", "ACC_DTYPE", "ARCH", "B_DTYPE", "B_LAYOUT",
    "CONFIG", "Config", "config", "cluster_at", "cpasync", "cute", "CuteLauncher", "cutlass", "EPI_BARRIER",
    "EPILOGUE_WARPS", "epilogue_tile", "gemm_host", "gemm_kernel", "LayoutEnum", "len", "make_fake_stream",
    "make_fake_tensor", "make_raster", "make_tiled_mma", "MMA_WARP", "NamedTuple", "OUT_DTYPE", "OUT_LAYOUT",
    "pipeline", "shared_storage", "SharedStorage", "sm100_utils", "tcgen05", "THREADS", "TMA_WARP",
    "TMEM_BARRIER", "transform_partitioned_tensor_layout", "VARIANT_CONFIGS", "zero_operand",
    # the torch host's checked launch (templates/gemm/cute/host.jinja)
    "_lean", "_launch", "TVM_FFI", "RuntimeError",
    # the JAX entry (templates/gemm/cute/jax_host.jinja)
    "_jax_entry", "_jax_host", "cute_jax",
    # the C export (templates/gemm/cute/export_host.jinja)
    "_export_host", "cuda",
})

# Every other identifier its code uses (an epilogue argument's names must avoid them).
RESERVED: frozenset[str] = frozenset({
    "_k", "a", "a_casts", "a_mask", "a_tiles", "ab_barriers", "ab_pipe", "ab_stages", "acc", "acc_barriers",
    "acc_base", "acc_epi", "acc_layout", "up_tile", "acc_pipe", "acc_stages", "acc_state", "acc_tile", "allocator_warp_id",
    "assumed_align", "b", "b_casts", "b_mask", "b_tiles", "band_first", "barrier_for_retrieve", "barrier_id",
    "barrier_storage", "batch", "bidx", "bidy", "bidz", "bool", "bSG_g", "bSG_s", "buf", "cfg", "clusters", "fn",
    "cluster_crd", "cluster_m", "cluster_n", "cluster_of", "cluster_shape_mn", "cluster_vmnk", "cm", "cn", "cols",
    "consumer_group", "crd", "crd_tile", "cta_group", "cta_layout_vmnk", "cta_m", "cta_n", "defer_sync", "div",
    "divisibility", "dtype", "ei", "epi_barrier", "epi_m", "epi_n", "epi_stages", "epi_tile", "extent", "fastmath",
    "full", "g_sub", "gA", "gB", "gOut_epi", "grid", "group_m", "group_rows", "int", "is_leader", "is_relaxed",
    "is_two_cta", "k_blocks", "k_tiles", "kb", "layout", "lb", "lead", "M", "m0", "mA", "major_rows", "matrix",
    "max_clusters", "mB", "mcast_mask", "mcast_mode", "mm", "mma_tiler", "mma_v", "mode", "mOut", "N", "n0",
    "num_stages", "num_threads", "out", "out_tile", "pair", "per_batch", "persistent", "producer_group",
    "property", "r2s", "r_acc", "r_out", "raster", "read", "rest", "rows", "sA", "sA_layout", "sB", "sB_layout",
    "self", "shape", "si", "smem_bytes", "sOut", "sOut_layout", "space", "stage_bytes", "state", "storage",
    "store_pipe", "stored", "stream", "stride", "sub_size", "subs", "swizzle", "tA", "tAgA", "tAsA", "tB",
    "tBgB", "tBsB", "tCrA", "tCrB", "thr_mma", "thr_r2s", "thr_t2r", "tidx", "tile_k", "tile_m", "tile_n",
    "tiled_mma", "tiler", "tiles", "tl", "tm", "tma", "tma_a", "tma_b", "tma_bar_ptr", "tma_out", "tmem",
    "tmem_columns", "tmem_dealloc", "tmem_ptr", "tmem_slot", "tn", "tOut", "torch_rows_first", "tRS_out",
    "tRS_sOut", "t2r", "tTR_acc", "tTR_crd", "tuple", "two_cta", "two_cta_tmem_dealloc_mbar_ptr", "tx_count",
    "typing", "unroll", "use_tvm_ffi_env_stream", "variant", "variants", "vector", "warp", "warp_n", "within", "work",
    "work_count",
    "work_index", "work_stride", "x",
    # a `training` backward's own (templates/gemm/cute/training_sm100.jinja: dOut at a subtile, pre's TMA views; the
    # rest of its names are the sm90 module's, rendered by the same macros: cute_sm90/names.py)
    "aux_sub", "g_aux_tile", "gPre_epi", "pre_tile", "tRS_pre",
    # a gated one's (pre's up half by TMA, G's dgate and dup element-wise, the up tiles aliasing B's in dgrad and wgrad)
    "g_gate", "g_gate_sub", "g_gate_tile", "g_up", "g_up_sub", "g_up_tile", "gUp_epi", "gU", "tRS_pre_up", "up_pre_tile",
})

# How its templates derive names from an epilogue argument `x`.
ARG_DERIVED: tuple[str, ...] = ("m{}", "r_{}", "g_{}", "g_{}_tile")
