"""Names a spec gives to generated code: the kernel's name (a module, a function, a torch op) and each
epilogue argument's name (a launcher parameter, a kernel parameter and the locals derived from it).

A name is refused at load when it is not a plain identifier, starts with two underscores (dunders,
the package's `__init__`), is a Python keyword or soft keyword, is a name the generated code uses
itself (its imports, constants, private helpers, locals), or derives a name that collides with one
of those or with another argument's names. So every name that passes renders a module that compiles and computes
what the spec says: generated code never has to prefix its own identifiers.

`RESERVED` is checked mechanically: tests/test_hardening_names.py tokenizes every rendered catalogue
module (and variants with every epilogue op and schedule) and fails when a template emits an
identifier that is neither derived from a spec name nor listed here.
"""

from __future__ import annotations

import keyword
import re

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 64

# The CuTe modules' own (templates/cute/*.jinja): the DSL's imports, the plan's constants, the host and
# kernel functions, and the free names their nested helpers read.
CUTE_MODULE_NAMES: frozenset[str] = frozenset({
    "_fake_args", "_g2s", "_mkl", "_nkl", "_smem_layout", "A_DTYPE", "A_LAYOUT", "ACC_DTYPE", "ARCH",
    "B_DTYPE", "B_LAYOUT", "CONFIG", "Config", "config", "cute", "CuteLauncher", "cutlass", "gemm_host",
    "gemm_kernel", "LayoutEnum", "len", "LOAD_REGISTERS", "make_fake_stream", "make_fake_tensor",
    "make_r2s_copy", "make_raster", "make_tiled_mma", "MMA_REGISTERS", "NamedTuple", "OUT_DTYPE",
    "OUT_LAYOUT", "pipeline", "shared_storage", "SharedStorage", "sm90_utils", "zero_operand",
    # the JAX entry (templates/cute/jax_host.jinja)
    "_jax_entry", "_jax_host", "cute_jax",
    # the C export (templates/cute/export_host.jinja)
    "_export_host", "cuda",
})

# Every other identifier the CuTe modules use: the kernel's locals (TMA atoms, pipelines, partitions,
# the epilogue's registers) and the keyword arguments of the DSL calls.
CUTE_RESERVED: frozenset[str] = frozenset({
    "_k", "a_mask", "a_tiles", "ab_barriers", "ab_pipe", "ab_stages", "acc_regs", "assumed_align", "atom",
    "b_mask", "b_tiles", "barrier_id", "barrier_storage", "batch", "bidx", "bidy", "bidz", "block", "bool",
    "bSG_g", "bSG_s", "buf", "cfg", "cl", "cluster", "cluster_crd", "cluster_m", "cluster_n", "cluster_of",
    "cluster_shape_mn", "clusters", "cm", "cn", "cols", "consumer_group", "consumers", "crd", "cta_layout",
    "cta_layout_vmnk", "cta_m", "cta_n", "defer_sync", "depth", "div", "divisibility", "dtype", "ei",
    "elem_ty_acc", "elem_ty_d", "epi_barrier", "epi_base", "epi_m", "epi_n", "epi_stages", "extent",
    "fastmath", "full", "gA", "gB", "gOut", "gOut_sub", "grid", "group_id", "group_m", "int", "is_relaxed",
    "k_blocks", "k_major", "k_tiles", "kb", "layout", "lb", "lead", "length", "m0", "mA", "major_rows",
    "matrix", "max_clusters", "mB", "mcast_mask", "min_blocks_per_mp", "mma_order", "mma_warpgroups", "mode",
    "mOut", "multicast", "n0", "num_multicast", "num_stages", "num_threads", "order", "order_barriers",
    "cols_left", "order_phase", "out_atom", "rows_left", "sub_tm", "sub_tn", "pingpong", "producer_group", "property", "r2s", "r_acc", "r_out", "raster",
    "read", "release", "rows", "sA", "sA_layout", "sB", "sB_layout", "self", "shape", "si", "smem_bytes",
    "sOut", "sOut_layout", "space", "stage_bytes", "state", "storage", "store_pipe", "store_warp", "stored",
    "stream", "stride", "sub_crd", "sub_grid", "sub_shape", "sub_size", "subs", "swizzle", "tA", "tAgA",
    "tAsA", "tB", "tBgB", "tBsB", "tCrA", "tCrB", "thr_mma", "thr_r2s", "threads", "tidx", "tile_k",
    "tile_m", "tile_n", "tile_threads", "tile_tidx", "tiled_mma", "tiler", "tiler_mn", "tm", "tma", "tma_a",
    "tma_b", "tma_bar_ptr", "tma_out", "tn", "torch_rows_first", "tOut", "tRS_acc", "tRS_sOut", "tuple",
    "turn", "tx_count", "typing", "use_tvm_ffi_env_stream", "variants", "vector", "warp", "warpgroup", "scalars",
    "work_count", "work_stride"
})

# Names the generated module binds or reads at its top level (imports, constants, the builtins its
# functions call): a kernel's name becomes a module-level function and must not replace one of them.
MODULE_NAMES: frozenset[str] = frozenset({
    "annotations", "torch", "triton", "tl", "descriptor", "register_custom_op", "TritonLauncher",
    "SPEC", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "CONFIGS", "METADATA", "RUNTIME_ABI", "a", "b",
    "float", "range", "type", "AttributeError", "ImportError", "TypeError", "ValueError", "_g", "_tile_coords",
    "_tanh", "_validate", "_check", "_run", "_fake", "_op", "_launcher", "_CONSTEXPRS",
    "VARIANT_CONFIGS", "_VARIANT_CONSTEXPRS", "SPLIT_K", "SPLIT_K_ATOMIC", "_split_k_reduce",
    "SWAP_AB",
    # Pallas TPU modules (templates/pallas/)
    "functools", "jax", "jnp", "lax", "pl", "pltpu", "_rt", "NAME", "AB_BUFFERS", "VMEM_LIMIT_BYTES",
    "_kernel", "_build", "_call",
    # Pallas Mosaic GPU modules (templates/pallas/gemm_mgpu.py.jinja)
    "plgpu", "_mg", "STAGES", "WGMMA_IN_FLIGHT", "WARPGROUPS", "WG_N", "OUT_SLOTS", "A_SWIZZLE", "B_SWIZZLE",
    "OUT_SWIZZLE", "SMEM_BYTES", "min", "max", "TILE_M", "TILE_N", "TILE_K", "EPI_M", "EPI_N", "PERSISTENT",
    "CLUSTER_M", "CLUSTER_N", "RASTER_DIM",
}) | CUTE_MODULE_NAMES

# Every other identifier the generated code uses: kernel parameters and locals, launcher locals,
# keyword arguments of the calls it makes. An epilogue argument becomes a parameter of the kernel and
# of each launcher function, so its name (and each name derived from it) must avoid all of them.
RESERVED: frozenset[str] = MODULE_NAMES | CUTE_RESERVED | frozenset({
    "specgen", "guards", "FAST_MATH", "NUM_SMS", "BATCH", "M", "N", "K", "K_b", "out", "a_desc",
    "b_desc", "out_desc", "a_ptr", "b_ptr", "out_ptr", "a_base", "b_base", "out_base", "a_ptrs",
    "b_ptrs", "out_ptrs", "stride_a", "stride_b", "stride_ab", "stride_bb", "stride_ob", "stride_om",
    "sa", "sb", "so", "pa", "pb", "po", "tile_id", "num_pid_m", "num_pid_n", "per_group", "first_m", "group_rows",
    "pid_m", "pid_n", "pid_b", "work", "tiles_per_batch", "offs_m", "offs_n", "offs_k", "mask_m",
    "mask_n", "k", "k_in", "off_m", "off_n", "off_k", "acc", "halves", "x", "tiles", "key",
    "device", "batch", "batch_b", "ok", "result", "_", "mask", "other", "dtype", "input_precision",
    "out_dtype", "do_not_specialize", "flatten", "is_pure", "pack", "persistent", "tma",
    "variant", "block_m", "block_n", "constexprs", "a_box", "b_box", "out_box",
    # the TMA launchers' launch-cache key (templates/triton/gemm.py.jinja: a local and the keyword)
    "args_key",
    # split-K (templates/triton/gemm.py.jinja, tile.jinja): kernel parameters and locals, the reduction's
    # locals, the launcher's, and the keywords of the atomic and cache-modified calls
    "ws_ptr", "counts_ptr", "pid_k", "slot", "k_tiles", "k_per_split", "k_lo", "k_hi", "last", "ws_offs",
    "tile_ws", "arrived", "part", "split_k", "split_atomic", "ws", "counts", "sem", "cache_modifier",
    # Pallas TPU modules: kernel refs and locals, BlockSpec index-map arguments, launcher locals, keywords
    "a_ref", "b_ref", "out_ref", "acc_ref", "_init", "_epilogue", "valid", "k_total", "block_k", "m", "n",
    "blk_m", "blk_n", "blk_k", "grid", "in_specs", "out_shape", "out_specs", "bb", "i", "j", "b_shape",
    "varying", "mode", "interpret", "transpose", "int", "object", "frozenset", "name", "pallas", "tpu",
    "memory_space", "scratch_shapes", "compiler_params", "dimension_semantics", "vmem_limit_bytes",
    "cost_estimate", "flops", "transcendentals", "bytes_accessed", "preferred_element_type", "static_argnames",
    # Pallas Mosaic GPU modules: kernel refs and locals, pipeline and epilogue locals, launcher locals, keywords
    "a_gmem", "b_gmem", "out_gmem", "a_smem", "b_smem", "out_smem", "a_spec", "b_spec", "a_op", "b_op", "a_first",
    "b_first", "a_view", "b_view", "out_view", "_acc", "_scope", "_tile", "allocations", "bi", "body", "col0",
    "row0", "context", "ej", "ignore", "info", "k_steps", "kk", "lin", "m_tiles", "n_tiles", "mi", "ni", "mma",
    "out_cols", "out_rows", "n_pad", "res_barrier", "run_pipeline", "sms", "wg", "wg_cols", "mgpu", "mosaic_gpu",
    "collective_axes", "compute_context", "delay_release", "grid_names", "lowering_semantics",
    "max_concurrent_steps", "memory_registers", "num_barriers", "num_compute_wgs", "out_type", "thread_name",
    "transforms", "wait_read_only", "wg_axis",
    # (2-CTA clusters: the CTA's place in its pair, the launch keywords)
    "cta", "cluster", "cluster_names",
})

OPERANDS = frozenset({"a", "b", "out"})

# How the templates derive names from an epilogue argument `x`: its pointer, the vector loaded from it,
# a residual's batch-offset base, tile, strides and host stride tuple (templates/triton/*.jinja,
# specgen/designs/gemm_triton.py), its ref in a Pallas kernel, and its global tensor and registers in a CuTe
# kernel. Every argument is held to all of them, whatever its role.
ARG_DERIVED: tuple[str, ...] = ("{}_ptr", "{}_v", "{}_base", "{}_tile", "stride_{}m", "stride_{}b", "s_{}",
                                "{}_ref",  # the Pallas kernel's ref of the argument (templates/pallas/)
                                # Mosaic GPU (templates/pallas/gemm_mgpu.py.jinja): its GMEM ref, a residual's batch view
                                "{}_gmem", "{}_view",
                                # CuTe (templates/cute/*.jinja): the argument's global tensor, its registers
                                # and a residual's per-thread view of its subtile
                                "m{}", "r_{}", "g_{}")

# Windows device names: a module file named so cannot be created there.
_DEVICE_NAMES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))})


def _common(name: str) -> str | None:
    if not IDENTIFIER.fullmatch(name):
        return f"{name!r} is not an identifier (a letter or '_', then letters, digits or '_')"
    if name.startswith("__"):
        return f"{name!r} starts with '__': such names (dunders like __init__) belong to Python and the package"
    if len(name) > MAX_NAME:
        return f"a name has at most {MAX_NAME} characters (got {len(name)})"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return f"{name!r} is a Python keyword"
    return None


def derived_names(name: str) -> list[str]:
    return [pattern.format(name) for pattern in ARG_DERIVED]


def arg_name_problem(name: str) -> str | None:
    """Why an epilogue argument may not be called `name`, or None."""
    problem = _common(name)
    if problem:
        return problem
    if name in OPERANDS:
        return None  # GemmSpec says that an operand has this name, with the way out
    if name in RESERVED:
        return f"{name!r} is a name the generated kernel or launcher uses itself"
    for derived in derived_names(name):
        if derived in RESERVED:
            return f"{name!r} derives {derived!r}, which the generated code uses itself"
    return None


def kernel_name_problem(name: str) -> str | None:
    """Why a kernel may not be called `name` (a module file, a function and a torch op), or None."""
    problem = _common(name)
    if problem:
        return problem
    if any(n in MODULE_NAMES for n in (name, f"_{name}_kernel", f"{name}_jax", f"{name}_jax_torch")):
        return f"{name!r} is a name the generated module uses itself (an import, a constant or a builtin)"
    if name.lower() in _DEVICE_NAMES:
        return f"{name!r} is a device name on Windows: no file can be called {name}.py there"
    return None


def check_arg_name(name: str) -> str:
    problem = arg_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


def check_kernel_name(name: str) -> str:
    problem = kernel_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name
