"""The identifiers the grouped Triton design's modules use (templates/grouped/): checked by
tests/test_hardening_names.py's rendered-module tokenizer (and the grouped kind's own test)."""

from __future__ import annotations

MODULE_NAMES: frozenset[str] = frozenset({
    "triton", "tl", "TritonLauncher", "BLOCK_M", "BLOCK_N", "BLOCK_K", "CONFIGS", "_g", "_gg", "_tanh", "_CONSTEXPRS",
    "_CONSTEXPRS_64", "_functional", "_descriptor", "SWAP_AB", "VARIANT_CONFIGS", "_VARIANT_CONSTEXPRS",
    # a `training` backward's (templates/grouped/triton/backward.jinja): its launch helpers and tables, and the
    # index's name where a lambda takes it at module level
    "STREAM_TILES", "_BF16", "_dgrad", "_wgrad", "_forward_train", "_recompute", "offs",
    # the split last wave's (kernels.jinja ragged_m; its reduction is the dense design's _split_k_reduce)
    "TAIL_SPLIT", "G_BLOCK", "_cursor_max",
})

# Every other identifier its code uses (an epilogue argument's names must avoid them): the group index's
# argument names (`offs`, `group_sizes`) among them.
RESERVED: frozenset[str] = frozenset({
    "FAST_MATH", "G", "INDEX_64", "K", "K_b", "M", "MAX_TILES", "N", "NUM_SMS", "a_ptr", "a_ptrs", "acc", "b_base",
    "b_ptr", "b_ptrs", "cols", "do_not_specialize", "end", "g", "group_sizes", "grouped", "index_64", "index_ptr",
    "input_precision", "is_pure", "k", "k_in", "ks", "local", "mask", "mask_m", "mask_n", "num_pid_n", "offs",
    "offs_k", "offs_m", "offs_n", "other", "out_dtype", "out_ptr", "pack", "persistent", "pid_m", "pid_n", "rows",
    "sa", "sb", "seen", "so", "start", "stride_a", "stride_b", "stride_bg", "stride_om", "tiles", "work", "x",
    "a_desc", "b_desc", "off_m", "off_n", "off_k", "num_pid_m", "variant", "block_m", "block_n", "block_k",
    "constexprs",
    # a gated epilogue's: B's 2N columns, the up tile and accumulator, the split gate and up values
    "N2", "acc_up", "b_up", "b_up_ptrs", "offs_bn", "mask_bn", "bcols", "gate", "up",
    # a `training` backward's: the ragged-K wgrad kernel's and the streaming kernels' parameters and locals
    "d", "gg", "pid", "programs", "stride_ak", "stride_am", "stride_bk", "stride_bn", "stride_og", "src_stride",
    # the split last wave's: the group index's vector view, the split, the wave's work items, the offs scan
    "offs_g", "raw", "starts", "group_tiles", "splits", "split_from", "item", "past", "here", "g_block",
    "a_max", "a_before", "b_max", "b_before",
    # the ragged-K kernel's TMA loop: its first box's row, the whole tiles, a masked box's rows; its TMA store's switch
    "k0", "whole", "k_rows", "TMA_STORE",
})

# The module-level names its backward derives from a kernel's name beside `_<name>_kernel`.
KERNEL_DERIVED: tuple[str, ...] = ("_{}_act_rows_kernel", "_{}_grad_cols_kernel")

# How its templates derive names from an epilogue argument `x` (`x_g`: a per-group operand's row for group g).

ARG_DERIVED: tuple[str, ...] = ("{}_ptr", "{}_v", "{}_g")
