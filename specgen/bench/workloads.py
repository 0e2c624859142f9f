"""What `specgen bench` and the tuner run on the GPU: a spec's inputs at a shape (torch tensors in the
logical layout every launcher takes: A (M, K), B (K, N) in the spec's major modes, then each epilogue
argument in chain order), our rendered module's call, and the peer a user would run instead:
cuBLAS through `torch.matmul`, `torch._scaled_mm` for fp8, eager torch for a fused epilogue
(`addmm` where it folds a bias or a residual), XLA (`jax.jit`) for a Pallas target. Imports torch (and
jax for Pallas) inside the functions."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from specgen.bench.shapes import Shape
from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.load import LoadedSpec, load_file
from specgen.spec.models import Target
from specgen.targets import Backend

TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "tf32": "float32", "int8": "int8",
                "int32": "int32", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def catalogue_kernel(name: str, specs: Path) -> LoadedSpec:
    """The kernel called `name` among the spec files of the folder `specs` (the gpu/ scripts' catalogue):
    exactly one, else a ValueError that says how many."""
    found = [s for f in sorted(specs.glob("*.toml")) for s in load_file(f) if s.name == name]
    if len(found) != 1:
        raise ValueError(f"{name}: {len(found)} kernels of that name in {specs} (one expected)")
    return found[0]


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, TORCH_DTYPES[name])


def _random(shape: tuple[int, ...], dtype: str, seed: int) -> Any:
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, device="cuda", generator=g)
    return x.to(torch_dtype(dtype))


def inputs(spec: GemmSpec, shape: Shape, seed: int = 0) -> tuple[Any, ...]:
    """Random normal A and B (unit-ish scales, as BASELINES.md measures) and the epilogue's arguments."""

    m, n, k, batch = shape.m, shape.n, shape.k, shape.batch
    lead = (batch,) if spec.batch else ()
    a = _random((*lead, m, k), spec.a.dtype.value, seed)
    if spec.a.major == "mn":
        a = _random((*lead, k, m), spec.a.dtype.value, seed).transpose(-1, -2)
    b = _random((*lead, k, n), spec.b.dtype.value, seed + 1)
    if spec.b.major == "k":  # a weight stored (N, K), passed as w.t()
        b = _random((*lead, n, k), spec.b.dtype.value, seed + 1).transpose(-1, -2)
    args: list[Any] = [a, b]
    for i, arg in enumerate(spec.runtime_args()):
        if arg.shape == "scalar":
            args.append(0.5)
        elif arg.shape == "matrix":
            args.append(_random((*lead, m, n), arg.dtype.value, seed + 10 + i))
        else:
            extent = m if arg.shape == "vec_m" else n
            v = _random((extent,), arg.dtype.value, seed + 10 + i)
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
        if op.op == "bias":
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


def ours_call(module: ModuleType, spec: GemmSpec, target: Target, args: tuple[Any, ...]) -> Callable[[], Any]:
    """Our rendered module's call: the Pallas Mosaic GPU modules take torch tensors through `<name>_torch`."""
    name = module.METADATA["kernel"] if hasattr(module, "METADATA") and "kernel" in module.METADATA else spec.name
    fn = getattr(module, f"{name}_torch" if target.backend is Backend.pallas else name)
    if target.backend is Backend.pallas:
        import torch

        def call() -> Any:
            out = fn(*args)
            torch.cuda.synchronize()  # jax's stream: the timer's rounds wait for the kernel
            return out

        return call
    return lambda: fn(*args)


def max_error(ours: Any, peer: Any) -> float:
    """max |ours - peer| / max |peer|: 0.01 is the benches' bar (one output rounding)."""
    import torch

    if not isinstance(peer, torch.Tensor):
        peer = torch.from_dlpack(peer)
    o, p = ours.float(), peer.float()
    return float((o - p).abs().max().item() / max(p.abs().max().item(), 1e-30))


def build_module(loaded: LoadedSpec, target: Target, folder: Path | None = None,
                 module_name: str | None = None) -> ModuleType:
    """Render one spec's module for `target` and import it (rendered as `specgen render` renders it: every
    file it writes, e.g. a Pallas target's package `__init__.py` beside the module)."""
    from specgen.compile import load_rendered
    from specgen.render.catalogue import render_modules
    from specgen.render.writer import atomic_write

    folder = folder or Path(tempfile.mkdtemp(prefix="specgen-bench-"))
    texts = render_modules(loaded, [target])
    for rel, text in texts.items():
        # atomically: `tune --ray` timing actors share the folder, and one may import a module another is
        # writing (or one killed mid-write left); a partial file would fail every job on that module
        atomic_write(folder / rel, text.encode())
    (module,) = [rel for rel in texts if not rel.endswith("__init__.py")]
    return load_rendered(folder / module,
                         module_name or f"_specgen_bench_{loaded.name}_{loaded.spec_hash}_{target.backend.value}")


class GpuWorkloads:
    """run.Workloads on this machine's CUDA device: the targets of its compute capability (Mosaic TPU
    targets need a TPU), each spec's module rendered once."""

    def __init__(self, folder: Path | None = None) -> None:
        import torch

        major, minor = torch.cuda.get_device_capability()
        self.cc = 10 * major + minor
        self.folder = folder or Path(tempfile.mkdtemp(prefix="specgen-bench-"))
        self.modules: dict[tuple[str, str], ModuleType] = {}

    def runs(self, target: Target) -> bool:
        from specgen.targets import target_info

        info = target_info(target)
        return info.memory == "smem" and info.compute_capability == self.cc

    def make(self, loaded: LoadedSpec, target: Target, shape: Shape) -> Any:
        from specgen.bench.run import Workload
        from specgen.bench.timing import Call

        key = (loaded.spec_hash, str(target))
        if key not in self.modules:
            self.modules[key] = build_module(loaded, target, self.folder)
        args = inputs(loaded.spec, shape)
        ours = ours_call(self.modules[key], loaded.spec, target, args)
        peer = peer_call(loaded.spec, target, args)
        name = peer_name(loaded.spec, target)
        return Workload(Call(f"{loaded.name}@{target}", ours), Call(name, peer), name, max_error(ours(), peer()))
