"""The identifiers the Triton design's modules use (templates/gemm/triton/): checked by tests/test_hardening_names.py."""

from __future__ import annotations

# Names its modules bind or read at their top level (a kernel's name must not replace one).
MODULE_NAMES: frozenset[str] = frozenset({
    "triton", "tl", "descriptor", "TritonLauncher", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "CONFIGS", "_g",
    "_tile_coords", "_tanh", "_CONSTEXPRS", "VARIANT_CONFIGS", "_VARIANT_CONSTEXPRS", "SPLIT_K", "SPLIT_K_ATOMIC",
    "_split_k_reduce", "SWAP_AB",
    # a spec with a backward (training): its launch configs, host functions, custom ops and autograd hooks
    "BACKWARD_CONFIGS", "BACKWARD_TILES", "_BACKWARD_KERNELS", "_autograd_backward", "_backward", "_backward_fake",
    "_backward_op", "_forward_pre", "_setup_context", "_tr", "_train", "_train_fake", "_train_op", "register_backward",
    "GRAD_COLS", "_gemm", "_grad_cols",
    # the other chains' backward (scale, residual, clamp, cast, bias along m; an fp8 forward's): the chain pass's
    "CHAIN_COLS", "_CHAIN", "_inputs", "any", "list",
    # the recompute GEMM's epilogue knobs (templates/gemm/triton/recompute.jinja) and its jit helpers
    "RECOMPUTE_EPILOGUE", "_recompute_subtile", "_column_subtile", "_column_half",
    "zip",
})

# Every other identifier its code uses (an epilogue argument's names must avoid them).
RESERVED: frozenset[str] = frozenset({
    "FAST_MATH", "NUM_SMS", "BATCH", "M", "N", "K", "K_b", "a_desc", "b_desc", "out_desc", "a_ptr", "b_ptr",
    "out_ptr", "a_base", "b_base", "out_base", "a_ptrs", "b_ptrs", "out_ptrs", "stride_a", "stride_b", "stride_ab",
    "stride_bb", "stride_ob", "stride_om", "sa", "sb", "so", "pa", "pb", "po", "tile_id", "num_pid_m", "num_pid_n",
    "per_group", "first_m", "group_rows", "pid_m", "pid_n", "pid_b", "work", "tiles_per_batch", "offs_m", "offs_n",
    "offs_k", "mask_m", "mask_n", "k", "k_in", "off_m", "off_n", "off_k", "acc", "halves", "x", "tiles", "batch_b",
    "mask", "other", "input_precision", "out_dtype", "do_not_specialize", "flatten", "is_pure", "pack", "persistent",
    "tma", "variant", "block_m", "block_n", "constexprs", "a_box", "b_box", "out_box", "args_key", "ws_ptr",
    "counts_ptr", "pid_k", "slot", "k_tiles", "k_per_split", "k_lo", "k_hi", "last", "ws_offs", "tile_ws", "arrived",
    "part", "split_k", "split_atomic", "ws", "counts", "sem", "cache_modifier",
    # a gated epilogue's: B's 2N columns, the up tile and accumulator, the split gate and up values
    "N2", "acc_up", "b_up", "b_up_ptrs", "offs_bn", "mask_bn", "gate", "up",
    # a backward's (training): its kernels' parameters and locals, its host part's
    "BLOCK_P", "BLOCK_Q", "BLOCK_R", "P", "Q", "R", "_pre_grad", "axis", "ctx", "dout", "da", "db",
    "dbias_flat", "dout_ptr", "g", "g_ptr", "grad", "grads", "inputs", "mask_p", "mask_q", "need",
    "need_a", "need_b", "offs_p", "offs_q", "offs_r", "output", "pid_p", "pid_q", "pre",
    "pre_ptr", "pre_tile", "kr", "r_in", "role", "stride_dm", "stride_dn", "acc_lo", "acc_hi", "offs_h", "mask_h",
    "stride_gm", "stride_gn", "stride_pm", "stride_pn", "training", "strict", "x_desc", "y_desc", "dst_ptr", "dst", "D_TMA", "D_T",
    "x_ptr", "y_ptr", "x_ptrs", "y_ptrs", "stride_xp", "stride_xr", "stride_yr", "stride_yq", "stride_dstp", "stride_dstq",
    "X_T", "Y_T", "r0", "y", "src", "src_ptr", "stride_srcm", "stride_srcn", "FORM_G", "FORM_G2", "HAS_DBIAS", "form", "has_dbias",
    "m0", "rows", "col_sum", "sums", "tensors", "strides", "sums_ptr", "rows_per", "stride_sums", "first", "bands", "cols", "kernel",
    # a gated epilogue's backward: G's gate and up halves, Y's up tile, the host part's layout flag
    "g_gate", "g_up", "y_up", "gated",
    # (interleaved: the gate and up column pairs' offsets and masks, never tokenized before a test rendered one)
    "offs_q2", "mask_q2", "offs_n2", "mask2",
    # the other chains' backward: the gradient u walked back through the ops, an fp8 forward's second G, the sums
    # kernel's partials (R x C), the host part's arguments and outputs
    "u", "g2", "g2_ptr", "stride_src", "C", "ins", "outputs", "dt", "memory_format", "saved", "scalars",
    # a batched backward's: its matrices' batch strides, the TMA form's pointers before a tile's batch rebases them
    "stride_xb", "stride_yb", "stride_dstb", "stride_pb", "stride_db", "stride_srcb", "stride_gb", "pre_base",
    "dst_base", "dout_base", "per_matrix",
    # the recompute GEMM's epilogue in column subtiles (templates/gemm/triton/recompute.jinja): its knobs, the
    # subtile loop's index, a subtile's accumulators, origin, width, offsets and masks, the dOut loaded before the K
    # loop (SUB_EARLY: the subtile takes it), a half's side
    "EPI_SPLIT", "DOUT_TMA", "G_TMA", "DOUT_EARLY", "dout_early", "sub_q0", "offs_s", "mask_s", "sub_j", "acc_s", "up_s",
    "sub_p0", "SUB_Q", "SUB_EARLY", "sub_h", "epilogue", "GELU_FACTORED", "gelu_sq", "gelu_t", "FLATTEN",
})

# How its templates derive names from an epilogue argument `x`.
ARG_DERIVED: tuple[str, ...] = ("{}_ptr", "{}_v", "{}_base", "{}_tile", "stride_{}m", "stride_{}b", "s_{}",
                                 "d{}", "need_{}",  # a backward's: the argument's gradient, whether it is asked for
                                 # the chain pass's: a residual's column stride, the gradient's pointer and strides
                                 "stride_{}n", "d{}_ptr", "stride_d{}", "stride_d{}m", "stride_d{}n",
                                 "stride_d{}b")  # (a batched residual's gradient's batch stride)

# A backward's kernels, named from the kernel's name (templates/gemm/triton/backward.jinja).
KERNEL_DERIVED: tuple[str, ...] = ("_{}_forward_pre_kernel", "_{}_recompute_kernel", "_{}_dgrad_kernel", "_{}_wgrad_kernel",
                                    "_{}_forward_pre_kernel_tma", "_{}_recompute_kernel_tma", "_{}_dgrad_kernel_tma",
                                    "_{}_wgrad_kernel_tma", "_{}_grad_cols_kernel", "_{}_chain_kernel", "_{}_sums_kernel")
