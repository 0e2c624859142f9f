"""The identifiers the Triton design's modules use (templates/gemm/triton/): checked by tests/test_hardening_names.py."""

from __future__ import annotations

# Names its modules bind or read at their top level (a kernel's name must not replace one).
MODULE_NAMES: frozenset[str] = frozenset({
    "triton", "tl", "descriptor", "TritonLauncher", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "CONFIGS", "_g",
    "_tile_coords", "_tanh", "_CONSTEXPRS", "VARIANT_CONFIGS", "_VARIANT_CONSTEXPRS", "SPLIT_K", "SPLIT_K_ATOMIC",
    "_split_k_reduce", "SWAP_AB"
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
})

# How its templates derive names from an epilogue argument `x`.
ARG_DERIVED: tuple[str, ...] = ("{}_ptr", "{}_v", "{}_base", "{}_tile", "stride_{}m", "stride_{}b", "s_{}")
