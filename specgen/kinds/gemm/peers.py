"""The GEMM kind's inputs and peers on the GPU, for `specgen bench` and the tuner (problem.py's `inputs`,
`peer_name`, `peer_call`): torch tensors in the logical layout every launcher takes (A (M, K), B (K, N) in
the spec's major modes, then each epilogue argument in chain order), and the program a user would run
instead: cuBLAS through `torch.matmul`, `torch._scaled_mm` for fp8, eager torch for a fused epilogue
(`addmm` where it folds a bias or a residual), XLA (`jax.jit`) for a Pallas target. Imports torch (and jax
for XLA) inside the functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specgen.bench.tensors import TORCH_DTYPES, random_normal, torch_dtype
from specgen.spec.epilogue import b_columns
from specgen.targets import Backend

if TYPE_CHECKING:
    from specgen.kinds.gemm.spec import GemmSpec
    from specgen.spec.models import Target


def inputs(spec: GemmSpec, shape: tuple[int, int, int, int], seed: int = 0) -> tuple[Any, ...]:
    """Random normal A and B (unit-ish scales, as BASELINES.md measures) and the epilogue's arguments, at
    `shape` (problem.py's Shape: M, N, K, batch)."""
    m, n, k, batch = shape
    lead = (batch,) if spec.batch else ()
    n_out, n = n, n * b_columns(spec)  # a gated epilogue's B holds gate and up columns
    a = random_normal((*lead, m, k), spec.a.dtype.value, seed)
    if spec.a.major == "mn":
        a = random_normal((*lead, k, m), spec.a.dtype.value, seed).transpose(-1, -2)
    b = random_normal((*lead, k, n), spec.b.dtype.value, seed + 1)
    if spec.b.major == "k":  # a weight stored (N, K), passed as w.t()
        b = random_normal((*lead, n, k), spec.b.dtype.value, seed + 1).transpose(-1, -2)
    args: list[Any] = [a, b]
    for i, arg in enumerate(spec.runtime_args()):
        if arg.shape == "scalar":
            args.append(0.5)
        elif arg.shape == "matrix":
            args.append(random_normal((*lead, m, n_out), arg.dtype.value, seed + 10 + i))
        else:
            extent = m if arg.shape == "vec_m" else n_out
            v = random_normal((extent,), arg.dtype.value, seed + 10 + i)
            args.append(v.abs() + 0.5 if arg.dtype.value == "f32" else v)  # scales stay positive
    return tuple(args)


def _eager_chain(spec: GemmSpec) -> Callable[..., Any]:
    """The unfused torch program: the matmul (`addmm` where it takes the first op, `_scaled_mm` for fp8),
    then each remaining op elementwise."""
    import torch
    import torch.nn.functional as F

    acts = {"relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
            "silu": F.silu, "sigmoid": torch.sigmoid}
    ops = list(spec.epilogue)
    names = [arg.name for arg in spec.runtime_args()]
    out_dtype = torch_dtype(spec.out.dtype.value)
    fp8 = spec.a.dtype.value.startswith("fp8")
    first = ops[0] if ops else None
    rowcol = fp8 and first is not None and first.op == "scale" and first.by == "rowcol"
    bias_first = not fp8 and not spec.batch and first is not None and first.op == "bias" and first.along == "n"

    def run(a: Any, b: Any, *rest: Any) -> Any:
        env = dict(zip(names, rest, strict=True))
        todo = ops
        if fp8:
            one = torch.ones((), device=a.device)
            sa = env["scale_a"].reshape(-1, 1) if rowcol else one
            sb = env["scale_b"].reshape(1, -1) if rowcol else one
            x = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dtype)
            todo = ops[1:] if rowcol else ops
        elif bias_first:
            x, todo = torch.addmm(env[first.name], a, b), ops[1:]
        else:
            x = torch.matmul(a, b)
        x = _epilogue(todo, x, env, acts, residual=lambda x, c, beta: torch.add(x, c, alpha=beta),
                      clamp=lambda x, lo, hi: x.clamp(min=lo, max=hi), cast=lambda x, d: x.to(torch_dtype(d)))
        return x.to(out_dtype)

    return run


def _epilogue(ops: list, x: Any, env: dict[str, Any], acts: dict[str, Callable[[Any], Any]],
              residual: Callable[[Any, Any, float], Any], clamp: Callable[[Any, Any, Any], Any],
              cast: Callable[[Any, str], Any]) -> Any:
    """The epilogue ops applied one by one, as an unfused program would, in either framework (the
    framework's own primitives passed in: torch's and jax.numpy's arrays share the operators)."""
    for op in ops:
        if op.op == "gated":  # the eager MLP: act(h[..., :N]) * h[..., N:] (or the interleaved columns)
            gate, up = gate_and_up(op, x)
            x = acts[op.fn](gate) * up
        elif op.op == "bias":
            v = env[op.name]
            x = x + (v[:, None] if op.along == "m" else v)
        elif op.op == "scale":
            if op.by == "scalar":
                x = x * (op.value if op.value is not None else env[op.name or "alpha"])
            elif op.by == "row":
                x = x * env[op.name or "row_scale"][:, None]
            elif op.by == "col":
                x = x * env[op.name or "col_scale"]
            else:
                x = x * env["scale_a"].reshape(-1, 1) * env["scale_b"].reshape(1, -1)
        elif op.op == "activation":
            x = acts[op.fn](x)
        elif op.op == "residual":
            x = residual(x, env[op.name], op.beta)
        elif op.op == "clamp":
            x = clamp(x, op.min, op.max)
        else:  # cast
            x = cast(x, op.dtype.value)
    return x


def gate_and_up(op: Any, h: Any) -> tuple[Any, Any]:
    """A gated op's gate and up columns of h (..., 2N), by its layout, as views (torch or jax.numpy arrays)."""
    n = h.shape[-1] // 2
    return (h[..., :n], h[..., n:]) if op.layout == "halves" else (h[..., 0::2], h[..., 1::2])


def peer_name(spec: GemmSpec, target: Target) -> str:
    if target.backend is Backend.pallas:
        return "XLA (jax.jit)"
    if spec.a.dtype.value.startswith("fp8"):
        return "torch._scaled_mm" + (" + eager" if len(spec.epilogue) > 1 else "")
    return "eager torch" if spec.epilogue else "cuBLAS (torch.matmul)"


def _xla_chain(spec: GemmSpec, stored_transposed: tuple[bool, bool] = (False, False)) -> Callable[..., Any]:
    """The same program for XLA: jax.jit over jax arrays shared with torch through DLPack. An operand in
    `stored_transposed` arrives as its storage (B's (N, K) for a K-major B) and is transposed back inside the
    program, where XLA folds the transpose into the dot (`_xla_operands`)."""
    import jax
    import jax.numpy as jnp

    acts = {"relu": jax.nn.relu, "gelu": lambda x: jax.nn.gelu(x, approximate=False),
            "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True), "silu": jax.nn.silu, "sigmoid": jax.nn.sigmoid}
    names = [arg.name for arg in spec.runtime_args()]
    out_dtype = jnp.dtype(TORCH_DTYPES[spec.out.dtype.value])

    def run(a: Any, b: Any, *rest: Any) -> Any:
        env = dict(zip(names, rest, strict=True))
        a, b = (jnp.swapaxes(x, -1, -2) if t else x for x, t in zip((a, b), stored_transposed, strict=True))
        x = jnp.matmul(a, b, preferred_element_type=jnp.float32)
        f32 = jnp.float32
        x = _epilogue(spec.epilogue, x, env, acts, residual=lambda x, c, beta: x + beta * c.astype(f32),
                      clamp=jnp.clip, cast=lambda x, d: x.astype(jnp.dtype(TORCH_DTYPES[d])).astype(f32))
        return x.astype(out_dtype)

    return jax.jit(run)


def _to_jax(t: Any) -> Any:
    import jax
    import torch

    if not isinstance(t, torch.Tensor):  # a scalar epilogue argument
        return t
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # DLPack has no fp8: share the bytes, bitcast
        import jax.numpy as jnp

        u8 = jax.dlpack.from_dlpack(t.contiguous().view(torch.uint8))
        return jax.lax.bitcast_convert_type(u8, jnp.dtype(str(t.dtype).removeprefix("torch.")))
    return jax.dlpack.from_dlpack(t.contiguous())


def _xla_operands(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[bool, bool]]:
    """A and B for XLA as they are stored: a transposed view (its last dim not the contiguous one) goes as
    its storage, flagged, rather than as a `.contiguous()` copy in the view's order. The copy changes the
    peer's input: handed fp8 B as a row-major (K, N) array, XLA transposed it back on every call before
    cuBLAS's fp8 kernel (`wrapped_transpose`, 472 us beside the GEMM's 28 us at 16x8192x8192, H100,
    bench/results/2026-11-25-h100-s9-pass2-bench-fp8.json)."""
    out, flags = list(args), []
    for i in (0, 1):
        x = args[i]
        t = x.dim() >= 2 and x.stride(-1) != 1 and x.stride(-2) == 1
        out[i] = x.transpose(-1, -2) if t else x
        flags.append(t)
    return tuple(out), (flags[0], flags[1])


def peer_call(spec: GemmSpec, target: Target, args: tuple[Any, ...]) -> Callable[[], Any]:
    """The peer's call on `args` (for XLA: jax arrays made once, A and B as stored, and a call that waits for
    its result)."""
    if target.backend is Backend.pallas:
        stored, flags = _xla_operands(args)
        fn = _xla_chain(spec, flags)
        jargs = tuple(_to_jax(x) for x in stored)
        return lambda: fn(*jargs).block_until_ready()
    fn = _eager_chain(spec)
    return lambda: fn(*args)
