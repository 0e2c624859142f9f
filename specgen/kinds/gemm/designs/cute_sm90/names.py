"""The identifiers the CuTe sm90 design's modules use (templates/gemm/cute/: the DSL's imports, the plan's
constants, the host and kernel functions, the kernel's locals and the DSL calls' keywords)."""

from __future__ import annotations

# Names its modules bind or read at their top level (a kernel's name must not replace one).
MODULE_NAMES: frozenset[str] = frozenset({
    "_fake_args", "_g2s", "_mkl", "_nkl", "_smem_layout", "A_DTYPE", "A_LAYOUT", "ACC_DTYPE", "ARCH", "B_DTYPE",
    "B_LAYOUT", "CONFIG", "Config", "config", "cluster_at", "cute", "CuteLauncher", "cutlass", "gemm_host", "gemm_kernel",
    "LayoutEnum", "len", "LOAD_REGISTERS", "make_fake_stream", "make_fake_tensor", "make_r2s_copy", "make_raster",
    "make_tiled_mma", "MMA_REGISTERS", "NamedTuple", "OUT_DTYPE", "OUT_LAYOUT", "pipeline", "shared_storage",
    "SharedStorage", "sm90_utils", "zero_operand",
    # the torch host's checked launch (templates/gemm/cute/host.jinja)
    "_lean", "_launch", "TVM_FFI", "RuntimeError",
    # the JAX entry (templates/gemm/cute/jax_host.jinja)
    "_jax_entry", "_jax_host", "cute_jax",
    # the C export (templates/gemm/cute/export_host.jinja)
    "_export_host", "cuda",
    # split-K's DSMEM handoff (templates/gemm/cute/gemm_sm90.py.jinja)
    "_store_remote", "llvm", "nvvm",
    # a `training` backward (templates/gemm/cute/training.jinja, grad_cols.jinja, host_sm90.jinja)
    "GRAD_COLS_BANDS", "GRAD_COLS_CTAS", "GRAD_COLS_MIN_ROWS", "GRAD_COLS_THREADS", "GRAD_COLS_UNROLL", "GRAD_COLS_VEC", "TRAIN_CONFIGS", "_STUBS", "_cols", "_cols_launcher", "_cols_rows", "_grad_cols_fake_args", "_grad_cols_host", "_grad_cols_kernel", "_operands", "_product", "_train_fake_args", "_train_launcher", "_vector", "_vector_stub", "int", "isinstance", "train_host",
    # the JAX entry's backward (specgen/runtime/cute_jax_train.py)
    "_JAX_TRAIN", "_jax_differentiable", "_jax_train_bands", "_jax_train_cols", "_jax_train_cols_sum", "_jax_train_fused", "_jax_train_gemm", "_jt",
    "_jax_train_pre", "_jax_train_cols_fp8", "_jax_train_chain",
    # a gated backward: pre's and G's (M, N, 2) pairs, the gated columns kernel and its 16-byte checks and views
    "_gated_pairs", "_grad_cols_gated_kernel",
    # an fp8 forward's backward: its columns kernel (G_b, G_a) and launcher
    "_cols_fp8_launcher", "_grad_cols_fp8_fake_args", "_grad_cols_fp8_host", "_grad_cols_fp8_kernel",
    # another chain's backward (templates/gemm/cute/chain_pass.jinja): the chain pass, its launcher and host
    "_chain_launcher", "_chain_pass", "_chain_pass_fake_args", "_chain_pass_host", "_chain_pass_kernel", "_chain_rows",
    "sum",
})

# Every other identifier its code uses (an epilogue argument's names must avoid them).
RESERVED: frozenset[str] = frozenset({
    "_k", "a_mask", "band_first", "per_batch", "rest", "within", "work_index", "a_tiles", "ab_barriers", "ab_pipe", "ab_stages", "acc_regs", "assumed_align", "atom", "b_mask",
    "b_tiles", "barrier_id", "barrier_storage", "batch", "chain", "fp8", "bidx", "bidy", "bidz", "block", "bool", "bSG_g", "bSG_s",
    "buf", "cfg", "cluster", "cluster_crd", "fn", "staged", "cluster_m", "cluster_n", "cluster_of", "cluster_shape_mn",
    "clusters", "cm", "cn", "cols", "consumer_group", "consumers", "crd", "cta_layout", "cta_layout_vmnk", "cta_m",
    "cta_n", "defer_sync", "depth", "div", "divisibility", "dtype", "ei", "elem_ty_acc", "elem_ty_d", "epi_barrier",
    "epi_base", "epi_m", "epi_n", "epi_stages", "extent", "fastmath", "full", "gA", "gB", "gOut", "gOut_sub", "grid",
    "group_id", "group_m", "int", "is_relaxed", "k_blocks", "k_major", "k_tiles", "kb", "layout", "lb", "lead",
    "length", "m0", "mA", "major_rows", "matrix", "max_clusters", "mB", "mcast_mask", "min_blocks_per_mp",
    "mma_order", "mma_warpgroups", "mode", "mOut", "multicast", "n0", "num_multicast", "num_stages", "num_threads",
    "order", "order_barriers", "order_phase", "cols_left", "rows_left", "sub_tm", "sub_tn", "scalars", "out_atom", "pingpong", "producer_group", "property", "r2s", "r_acc",
    "r_out", "raster", "read", "release", "rows", "sA", "sA_layout", "sB", "sB_layout", "self", "shape", "si",
    "smem_bytes", "sOut", "sOut_layout", "space", "stage_bytes", "state", "storage", "store_pipe", "store_warp",
    "stored", "stream", "stride", "sub_crd", "sub_grid", "sub_shape", "sub_size", "subs", "swizzle", "tA", "tAgA",
    "tAsA", "tB", "tBgB", "tBsB", "tCrA", "tCrB", "thr_mma", "thr_r2s", "threads", "tidx", "tile_k", "tile_m",
    "tile_n", "tile_threads", "tile_tidx", "tiled_mma", "tiler", "tiler_mn", "tm", "tma", "tma_a", "tma_b",
    "tma_bar_ptr", "tma_out", "tn", "torch_rows_first", "tOut", "tRS_acc", "tRS_sOut", "tuple", "turn", "tx_count",
    "typing", "use_tvm_ffi_env_stream", "variants", "vector", "warp", "warpgroup", "work_count", "work_stride",
    # the kernel's operands by config (Config.operands: swap_ab)
    "operands", "swap_ab", "a_layout", "a_dtype", "b_layout", "b_dtype", "out_layout", "m_major",
    # the schedule's split of work and K (cluster_size: the persistent grid's divisor), and split-K's handoff
    "cluster_size", "launch_clusters", "first_work", "k_first", "k_count", "kpart", "k_per", "split_k", "split_full", "split_free",
    "split_phase", "partials", "cluster_ctas", "leader", "remote", "part", "i", "ptr", "value", "scope",
    "split_barriers", "sPartial", "unroll_full",
    # a `training` backward: the role's config and epilogue, the columns kernel, the host's operands
    "a_k", "aux", "b_k", "bx", "by", "configs", "contiguous", "fused", "g_aux", "layouts", "mG", "mPre", "mSrc", "mSums", "maux", "partial", "r_aux", "r_aux_next", "grad_frag", "r_pre", "stub", "sum_pending", "total",
    # the columns kernel's vectors and batches of rows, forward_pre's TMA store of pre
    "batched", "i0", "jv", "padded", "per_cta", "pitch", "pres", "ri", "srcs", "sums_frag", "vec",
    "bPre_g", "bPre_s", "bUp_g", "epi_per_subtile", "gPre_sub", "gUp_sub", "mPreT", "tPre", "tma_pre", "cute_jax_train", "dout",
    # a gated epilogue (templates/gemm/cute/gated.jinja's view of B, the up tiles the producer loads; the rest of its
    # names, sU, tCrU, acc_up, r_up, are the grouped CuTe sm90 design's too)
    "sk", "sl", "sn", "u_tiles",
    # its backward (pre's and G's pairs stored element-wise, the gated columns kernel's vectors, its padded copies)
    "dgate_frag", "dgate_view", "dup_frag", "dup_view", "every_other", "g_v", "gates", "grad_pairs", "half", "mPairs",
    "pairs", "pre_v", "r_pre_up", "sc", "sr", "ups", "vectors",
    # an fp8 forward's backward (G_b, G_a, the scales in the columns kernel, the operands' 16-bit copies)
    "a16", "b16", "g_a", "g_b", "mGa", "mGb", "mSa", "mSb", "scale_b_frag", "scales", "sa_rows",
    # another chain's (the chain pass's gradient buffers, their want bits, a row sum's lanes and column runs)
    "bufs", "kind", "lanes", "params", "runs", "wants",
    # the recompute's dOut ring (templates/gemm/cute/dout_sm90.jinja: its loader warp, pipeline, order and SMEM view)
    "_s", "DOUT_L2_EVICT_FIRST", "cache_policy", "bDout_g", "bDout_s", "dout_barriers", "dout_grid", "dout_order", "dout_phase", "dout_pipe", "dout_read",
    "dout_stages", "dout_state", "gDout", "mDout", "reads_dout", "sDout", "sDout_layout", "tDout", "tma_dout", "tRS_sDout",
})

# How its templates derive names from an epilogue argument `x`.
ARG_DERIVED: tuple[str, ...] = ("m{}", "r_{}", "g_{}")  # g_: a residual's per-thread view of its subtile
