"""The identifiers the grouped Pallas TPU design's modules use (templates/grouped/pallas/grouped_tpu.py.jinja and
the host macros it imports)."""

from __future__ import annotations

# Names its modules bind or read at their top level (a kernel's name must not replace one).
MODULE_NAMES: frozenset[str] = frozenset({
    "functools", "jax", "jnp", "lax", "pl", "pltpu", "_rt", "_gj", "NAME", "AB_BUFFERS", "VMEM_LIMIT_BYTES",
    "BLOCK_M", "BLOCK_N", "BLOCK_K", "TAIL_ZERO", "_kernel", "_build", "_call", "bool",
    # a training module's (templates/grouped/pallas/backward_tpu.jinja): the companions' kernels and the custom_vjp
    "OPERAND", "_pre_kernel", "_pre_build", "_dgrad_kernel", "_dgrad_build", "_wgrad_kernel", "_wgrad_build",
    "_dbias_kernel", "_dbias_build", "_meta", "_inside", "_train", "_train_fwd", "_train_bwd", "_dims",
    # a gated backward's (saved pre, a bias after the gate): each row's group
    "_row_groups",
    # a training module's differentiable torch entry (templates/gemm/pallas/torch_grad.jinja; runtime/jax_torch.py)
    "_TORCH_ENTRY", "_torch_entry", "jax_torch",
})

# Every other identifier its code uses (an epilogue argument's names must avoid them): the group index's argument
# names (`offs`, `group_sizes`) among them.
RESERVED: frozenset[str] = frozenset({
    "grouped_jax", "int", "bool", "object", "frozenset",
    "offsets_ref", "groups_ref", "tiles_ref", "a_ref", "b_ref", "refs", "base_ref", "out_ref", "acc_ref",
    "has_base", "g_total", "blk_m", "blk_n", "blk_k", "k_total", "block_k", "v", "kk", "j", "group", "real",
    "_init", "_accumulate", "_store", "a", "b", "valid", "row_tile", "first_visit", "g", "rows", "mine", "acc",
    "kept",
    # a gated epilogue's: the up block and accumulator, the call that passes B's (G, 2, N, K) view twice
    "up_ref", "up_acc_ref", "up", "call", "gated",
    # the ragged-K kernel's (templates/grouped/pallas/tpu_k.jinja): its visits' K tiles and masks
    "ktiles_ref", "ktiles", "last_visit", "start", "end", "k0", "a_rows", "b_rows",
    # the backward's: its rules' locals
    "meta", "kmeta", "tail", "gr", "da", "db", "dbase", "saved", "grad", "pre", "inside", "visit_tail", "block_m",
    "m", "n", "k", "in_specs", "out_spec", "visits", "offsets", "groups", "tiles", "sizes", "varying",
    "mode", "kernel", "base", "out", "interpret", "offs", "group_sizes", "b_shape", "name", "pallas",
    "tpu", "memory_space", "grid", "grid_spec", "num_scalar_prefetch", "out_shape", "out_specs", "scratch_shapes",
    "compiler_params", "dimension_semantics", "vmem_limit_bytes", "cost_estimate", "flops",
    "transcendentals", "bytes_accessed", "preferred_element_type", "static_argnames",
    # a gated backward's: B's 2N columns, pre's halves, dOut, the groups' ends
    "nb", "gate", "dout", "ends", "axis",
    # an fp8 forward's backward: U and wgrad's scaled G
    "u", "ga",
    # the kernels' visit body (inside a pl.when under shard_map in Pallas's plain interpreter)
    "branch", "_visit", "last_k",
})

# How its templates derive names from an epilogue argument `x`.
ARG_DERIVED: tuple[str, ...] = ("{}_ref", "d{}")  # d<bias>: a training module's bias gradient
