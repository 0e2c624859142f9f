"""`specgen compile` of a Triton training module's backward (spec: training): every kernel its backward launches
(forward_pre or recompute, dgrad, wgrad in their TMA forms; the columns kernel grad_cols, or the chain pass and its
sums kernel; a grouped module's act_rows), each reported as `<kernel>[role]` beside its plan SMEM (the streaming
kernels plan none: 0), with its registers and spills read off the cubin as the forward's are.

What each kernel is compiled with is what the module's own host code launches: its forward_pre (where it saves
pre) and its `_backward` run once on small CPU tensors (M = N = K = 256; a grouped module's 256 rows in 2 groups; a
batched module's batch of 2)
laid out as an nn.Linear layer calls them (A row-major, B = w.t(), so wgrad reads A^T and stores dB transposed),
with the runtime's launch replaced by a recorder. Each recorded launch (its arguments, TMA descriptors with their
boxes, constexprs, and the launch config of the target's compute capability) is specialized by Triton's own
binder, as the JIT would for that call, and compiled for the target: the signature cannot drift from what the
runtime launches (a second rendering of it in METADATA could). Nothing runs: no kernel is launched on the CPU.
Imports torch and triton: only `specgen compile` imports this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from specgen.targets import TargetInfo

SIZE = 256  # M, N and K of the recorded calls (multiples of 16: the JIT's aligned case)
GROUPS = 2
BATCH = 2  # a batched module's (batch = true)


def _torch_dtype(name: str) -> Any:
    from specgen.bench.tensors import torch_dtype

    return torch_dtype(name)


def _inputs(spec: dict) -> tuple[Any, ...]:
    """The forward's arguments on the CPU (zeros: nothing runs), as an nn.Linear layer passes them."""
    import torch

    from specgen.spec.epilogue import b_columns

    grouped = spec["kind"] == "grouped"
    if grouped:
        from specgen.kinds.grouped.spec import GroupedSpec as Model
    else:
        from specgen.kinds.gemm.spec import GemmSpec as Model  # type: ignore[assignment]
    model = Model.model_validate(spec)
    m = n = k = SIZE
    nb = n * b_columns(model)  # type: ignore[arg-type]
    lead = (GROUPS,) if grouped else ()
    batch = (BATCH,) if getattr(model, "batch", False) else ()  # A, B, out and a matrix argument per batch
    lead = lead or batch

    def zeros(*shape: int, dtype: object) -> Any:
        return torch.zeros(shape, dtype=_torch_dtype(dtype.value))  # type: ignore[attr-defined]

    a = zeros(*batch, k, m, dtype=model.a.dtype).transpose(-1, -2) if model.a.major == "mn" else zeros(*batch, m, k, dtype=model.a.dtype)
    b = zeros(*lead, nb, k, dtype=model.b.dtype).transpose(-1, -2) if model.b.major == "k" else zeros(*lead, k, nb, dtype=model.b.dtype)
    args: list[Any] = [a, b]
    if grouped:
        sizes = torch.full((GROUPS,), m // GROUPS, dtype=torch.int32)
        args.append(sizes.cumsum(0, dtype=torch.int32) if model.groups.index == "offs" else sizes)  # type: ignore[attr-defined]
    for arg in model.runtime_args():
        if arg.shape == "scalar":
            args.append(0.5)
        elif arg.shape == "matrix":
            args.append(zeros(*batch, m, n, dtype=arg.dtype))
        elif arg.shape == "group_n":
            args.append(zeros(GROUPS, n, dtype=arg.dtype))
        else:
            args.append(zeros(m if arg.shape == "vec_m" else n, dtype=arg.dtype))
    return tuple(args)


def record(module: ModuleType, cc: int) -> list[tuple[str, Any, dict, tuple, dict]]:
    """The backward's launches, in order (role, jit function, launch config for `cc`, arguments, constexprs): the
    module's forward_pre (where it saves pre) and `_backward` on `_inputs`, with the runtime's launches recorded."""
    import torch

    from specgen.runtime import guards
    from specgen.runtime.triton import training as runtime

    launches: list[tuple[str, Any, dict, tuple, dict]] = []
    kernel = module.METADATA["kernel"]
    role_of = re.compile(rf"^_{re.escape(kernel)}_(\w+?)_kernel(_tma)?$")

    def launch(name: str, jit: Any, config: dict, tiles: dict, grid: object, args: tuple, bf16: bool,
               per_matrix: bool = False, **constexprs: object) -> None:
        found = role_of.match(jit.__name__)
        launches.append((found.group(1) if found else jit.__name__, jit, config, args, {**tiles, **constexprs}))

    def config_for(name: str, configs: dict[int, dict[str, int]], device: int) -> dict[str, int]:
        return configs[cc]

    saved = runtime.launch, runtime.config_for, guards.INTERPRET
    runtime.launch, runtime.config_for, guards.INTERPRET = launch, config_for, True  # CPU tensors pass the guards
    try:
        inputs = _inputs(module.SPEC)
        pre = None
        if "forward_pre" in getattr(module, "BACKWARD_TILES", {}):
            forward = getattr(module, "_forward_train", None) or module._forward_pre
            out, pre = forward(*inputs)
        else:
            batch = (BATCH,) if module.SPEC.get("batch") else ()
            out = torch.zeros((*batch, SIZE, SIZE), dtype=_torch_dtype(module.SPEC["out"]["dtype"]))
        module._backward(torch.zeros_like(out), *inputs, pre)
    finally:
        runtime.launch, runtime.config_for, guards.INTERPRET = saved
    return launches


def compile_backward(module: ModuleType, target: TargetInfo, timed_cubin: Callable, roles: tuple[str, ...] = ()) -> list:
    """One result per backward kernel (`<kernel>[role]`; a kernel launched twice, with other constexprs, compiles
    once: the first launch's), each compiled through `timed_cubin` (compile.py's: the forward's timing and cubin
    reading); `roles`: those only (every role where empty)."""
    cc = target.compute_capability
    assert cc is not None
    meta = module.METADATA
    plans = meta.get("training", {}).get("kernels", {})
    rows, seen = [], set()
    for role, jit, config, args, constexprs in record(module, cc):
        if role in seen or (roles and role not in roles):
            continue
        seen.add(role)
        plan = plans.get(role, {}).get("plan", {}).get(cc, {}).get("smem_bytes", 0)
        rows.append(_compile(f"{meta['kernel']}[{role}]", jit, config, args, constexprs, target, plan, timed_cubin))
    return rows


def _compile(label: str, jit: Any, config: dict, args: tuple, constexprs: dict, target: TargetInfo, plan_smem: int,
             timed_cubin: Callable):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    from specgen.compile import CompileResult, compiler_message

    gpu = GPUTarget("cuda", target.compute_capability, 32)
    backend = make_backend(gpu)
    kwargs = {**constexprs, "FAST_MATH": True, **config}  # the GPU's fast math, as the forward's compile
    try:  # the JIT's own specialization of these arguments (JITFunction.run)
        binder = create_function_from_signature(jit.signature, jit.params, backend)
        bound, specialization, options = binder(*args, **kwargs)
        options, signature, consts, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
    except Exception as e:  # a Triton whose binder differs: say so, as a failed row
        return CompileResult(label, target.name, plan_smem, None, 0.0, f"specializing: {compiler_message(e)}")
    return timed_cubin(label, target, plan_smem, None,
                       lambda: triton.compile(ASTSource(jit, signature, consts, attrs), target=gpu, options=options.__dict__))
