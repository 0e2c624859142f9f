"""The JAX entry of generated CuTe DSL modules: `<name>_jax(a, b, ...)` on jax.Arrays, inside `jax.jit`.

The call is one XLA custom call into the CuTe DSL's own JAX runtime (`cutlass.jax`, DSL >= 4.4: the
`CuteDSLRT_NvJaxCutlassCall` FFI target of `libcute_dsl_runtime.so`), so the kernel runs on XLA's
stream with XLA's buffers: no copies, no torch. What differs from the public `cutlass.jax.cutlass_call`
is the compile: `cutlass_call` keys its compile cache on the concrete shapes (every new M, N or K
traces and compiles the kernel again, seconds each), while these kernels are shape-generic (dynamic
extents, the 16-byte strides TMA needs stated as divisibility). So this module builds the same
`FunctionSpec` with placeholder extents and compiles once per config (the default or a variant), per
device kind (the SM count caps the persistent grid) and per value of the scalar multipliers (XLA's FFI
passes only device buffers, so a runtime scalar is a compile-time constant here); the object is kept in
memory and on disk beside the torch launcher's (`$SPECGEN_CUTE_CACHE`). The compile happens when XLA
lowers the call for CUDA: `jax.eval_shape` and `jax.make_jaxpr` work on any machine, and a CPU
lowering raises an error that says why.

Trace-time checks (dtypes, ranks, shapes, the stored layout each major mode implies, the epilogue's
operands) raise naming the argument, as the Pallas modules' do (`specgen.runtime.jax`). Arrays on
several devices raise unless the call runs under `jax.shard_map`. Shapes TMA cannot describe in place
(a contiguous extent that is not a multiple of 16 bytes, an empty K) are zero-padded and the output
sliced back: a copy on that path only.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax._src import dispatch as _dispatch
from jax.interpreters import ad, mlir

from specgen.runtime import jax as _rt
from specgen.runtime.cute import CuteLauncher, cache_dir, compile_options, dsl_arch, grid_clusters

TMA_BYTES = 16  # TMA: global strides (and so a compact array's contiguous extent) in 16-byte units
EMPTY_K = 16  # an empty K runs as 16 zeros (TMA cannot describe a zero extent), as the torch launcher does


@dataclass(frozen=True)
class Operand:
    """One argument of the JAX entry: its name, role (a, b, vec_m, vec_n, matrix, scalar) and cutlass dtype name."""

    name: str
    role: str
    dtype: str

    @property
    def jnp_dtype(self) -> Any:
        import cutlass
        from cutlass.jax import cutlass_to_jax_dtype

        return jnp.dtype(cutlass_to_jax_dtype(getattr(cutlass, self.dtype)))


@dataclass(frozen=True)
class Problem:
    """The padded problem one call runs: extents the kernel sees and the caller's, the config index."""

    batch: tuple[int, ...]
    m: int
    n: int
    k: int
    mp: int
    np_: int
    kp: int
    variant: int | None


def round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def unit(dtype: Any) -> int:
    """Elements per 16 bytes: a TMA-moved array's contiguous extent is a multiple of this."""
    return TMA_BYTES // jnp.dtype(dtype).itemsize


def pad_to(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Zero-pad the end of each dim (no op where `x` has the shape already)."""
    if tuple(x.shape) == shape:
        return x
    return jnp.pad(x, [(0, s - d) for d, s in zip(x.shape, shape, strict=True)])


def concrete_scalar(fn: str, name: str, x: Any) -> float:
    """A scalar multiplier: a number or a concrete one-element array. The kernel takes it by value at
    launch and XLA's FFI passes only device buffers, so it is compiled in (one compile per value)."""
    if isinstance(x, jax.core.Tracer):
        raise TypeError(f"{fn}: argument '{name}' must be a concrete number (the CuTe kernel takes it by value; "
                        "XLA's FFI passes only device buffers), got a traced value: pass it as a Python float")
    if isinstance(x, bool) or not (isinstance(x, (int, float)) or (hasattr(x, "shape") and x.size == 1)):
        raise TypeError(f"{fn}: argument '{name}' must be a number or a one-element array, got {type(x).__name__}")
    value = float(x) if isinstance(x, (int, float)) else float(np.asarray(x).reshape(()))
    if not math.isfinite(value):
        raise ValueError(f"{fn}: argument '{name}' must be finite, got {value}")
    return value


class CuteJaxEntry:
    """One module's JAX entry (see the module docstring): `entry(*args)` checks, pads and calls."""

    def __init__(self, launcher: CuteLauncher, host: Any, configs: tuple[Any, ...], operands: tuple[Operand, ...],
                 a_major: str, b_major: str, batch: bool, out_dtype: str,
                 variants: tuple[tuple[tuple[str, int], ...], ...], gated: str = ""):
        self.launcher, self.host = launcher, host
        self.gated = gated  # a gated epilogue's layout ("halves", "interleaved"): B (2N, K) stored, K-major (EPI003)
        self.configs = configs  # the module's CONFIG, then its VARIANT_CONFIGS
        self.name = launcher.name  # errors start with the kernel's name, as the launchers' do
        self.operands, self.a_major, self.b_major, self.batch = operands, a_major, b_major, batch
        self.out = Operand("out", "out", out_dtype)
        self.variants = variants
        self._compiled: dict[tuple, tuple[bytes, bytes]] = {}
        self._lock = threading.Lock()
        self._jitted = jax.jit(self._trace, static_argnames=("scalars",))

    # ---- trace time ---------------------------------------------------------------------------------
    def __call__(self, *args: Any) -> jax.Array:
        if len(args) != len(self.operands):
            names = ", ".join(o.name for o in self.operands)
            raise TypeError(f"{self.name}: takes {len(self.operands)} arguments ({names}), got {len(args)}")
        arrays = {o.name: x for o, x in zip(self.operands, args, strict=True) if o.role != "scalar"}
        _rt.check_placement(self.name, arrays)
        scalars = tuple(concrete_scalar(self.name, o.name, x) for o, x in zip(self.operands, args, strict=True) if o.role == "scalar")
        return self._jitted(*arrays.values(), scalars=scalars)

    def stored_doc(self, o: Operand) -> str:
        """The stored layout the entry takes for an operand (a jax.Array has no strides)."""
        lead = "batch, " if self.batch else ""
        n = "2N" if self.gated else "N"
        dims = {"a": "M, K" if self.a_major == "k" else "K, M", "b": f"{n}, K" if self.b_major == "k" else f"K, {n}",
                "matrix": "M, N", "vec_m": "M", "vec_n": "N"}[o.role]
        return f"({'' if o.role.startswith('vec') else lead}{dims}) {o.jnp_dtype}"

    def problem(self, arrays: dict[str, jax.Array]) -> tuple[Problem, dict[str, jax.Array]]:
        """Check every array against the spec; return the padded problem and the arrays the kernel reads."""
        fn, rank, ops = self.name, 3 if self.batch else 2, {o.name: o for o in self.operands}
        a_op, b_op = ops["a"], ops["b"]
        a_shape = _rt.operand(fn, "a", arrays["a"], a_op.jnp_dtype, rank, self.stored_doc(a_op))
        lead = tuple(a_shape[:-2])
        m, k = (a_shape[-2], a_shape[-1]) if self.a_major == "k" else (a_shape[-1], a_shape[-2])
        b_shape = _rt.operand(fn, "b", arrays["b"], b_op.jnp_dtype, rank, self.stored_doc(b_op))
        nb = b_shape[-2] if self.b_major == "k" else b_shape[-1]
        _rt.expect_shape(fn, "b", b_shape, lead + ((nb, k) if self.b_major == "k" else (k, nb)), self.stored_doc(b_op))
        n = _rt.halved(fn, f"b.shape[{len(b_shape) - (2 if self.b_major == 'k' else 1)}]", nb, "N") if self.gated else nb
        out = dict(arrays)
        for o in self.operands[2:]:
            if o.role in ("vec_m", "vec_n"):
                extent = m if o.role == "vec_m" else n
                out[o.name] = _rt.vector(fn, o.name, arrays[o.name], o.jnp_dtype, extent, o.role[-1]).reshape(extent)
            elif o.role == "matrix":
                got = _rt.operand(fn, o.name, arrays[o.name], o.jnp_dtype, rank, self.stored_doc(o))
                _rt.expect_shape(fn, o.name, got, lead + (m, n), self.stored_doc(o))
        # TMA-moved arrays (A, B, out) need a contiguous extent of whole 16-byte units.
        k_units = [unit(op.jnp_dtype) for op, major in ((a_op, self.a_major), (b_op, self.b_major)) if major == "k"]
        k_unit = math.lcm(*k_units) if k_units else 1
        kp = round_up(k, k_unit) if k else max(EMPTY_K, k_unit)
        mp = m if self.a_major == "k" else round_up(m, unit(a_op.jnp_dtype))  # M-major A: M is contiguous
        np_ = round_up(n, math.lcm(unit(self.out.jnp_dtype), unit(b_op.jnp_dtype) if self.b_major != "k" else 1))
        variant = next((i for i, bounds in enumerate(self.variants)
                        if all({"M": m, "N": n, "K": k}[d] <= v for d, v in bounds)), None)
        return Problem(lead, m, n, k, mp, np_, kp, variant), out

    def _trace(self, *arrays: jax.Array, scalars: tuple[float, ...]) -> jax.Array:
        named = dict(zip((o.name for o in self.operands if o.role != "scalar"), arrays, strict=True))
        p, named = self.problem(named)
        out_dtype = self.out.jnp_dtype
        if p.m == 0 or p.n == 0 or 0 in p.batch:
            return jnp.zeros(p.batch + (p.m, p.n), out_dtype)
        mk = (p.mp, p.kp) if self.a_major == "k" else (p.kp, p.mp)
        bn = p.np_ * (2 if self.gated else 1)  # a gated B's gate and up columns, each half padded to np_
        nk = (bn, p.kp) if self.b_major == "k" else (p.kp, bn)
        if p.k == 0:  # an empty sum: zeros of K = EMPTY_K (the epilogue still runs on the zero accumulator)
            named["a"] = jnp.zeros(p.batch + mk, named["a"].dtype)
            named["b"] = jnp.zeros(p.batch + nk, named["b"].dtype)
        elif self.gated and p.np_ != p.n:
            named["b"] = self.pad_gated(named["b"], p)
        padded = {"a": p.batch + mk, "b": p.batch + nk, "vec_m": (p.mp,), "vec_n": (p.np_,), "matrix": p.batch + (p.mp, p.np_)}
        ins = [pad_to(named[o.name], padded[o.role]) for o in self.operands if o.role != "scalar"]
        axes = _rt.varying_axes(*ins)  # under jax.shard_map: every input varies over the same mesh axes
        ins = [jax.lax.pcast(x, tuple(axes - _rt.varying_axes(x)), to="varying") if axes - _rt.varying_axes(x) else x
               for x in ins]
        out = cute_call_p.bind(*ins, entry=self, variant=p.variant, scalars=scalars,
                               shape=p.batch + (p.mp, p.np_), dtype=out_dtype)
        return out if (p.mp, p.np_) == (p.m, p.n) else out[..., : p.m, : p.n]

    def pad_gated(self, b: jax.Array, p: Problem) -> jax.Array:
        """A gated B (..., 2N, K), K-major, zero-padded to (..., 2 np_, K) half by half: the kernel finds the up
        columns N = out's np_ columns after the gate's (halves) or beside each (interleaved), so each half pads
        to np_ on its own (the padded outputs, act(0) * 0, are sliced off)."""
        lead, kk = tuple(b.shape[:-2]), b.shape[-1]
        split = (2, p.n) if self.gated == "halves" else (p.n, 2)
        padded = (2, p.np_) if self.gated == "halves" else (p.np_, 2)
        return pad_to(b.reshape(lead + split + (kk,)), lead + padded + (kk,)).reshape(lead + (2 * p.np_, kk))

    # ---- compile (at lowering) ----------------------------------------------------------------------
    def tensor_specs(self) -> list[tuple[Any, Any, tuple[int, ...]]]:
        """(dtype, TensorSpec, placeholder shape) per array, inputs then out: compact row-major buffers
        shown to gemm_host in its torch-like logical shapes (A (M, K), B (K, N)) by a mode permutation;
        dynamic extents, the contiguous extent of a TMA-moved array divisible by 16 bytes. The placeholder
        extents equal the divisibility, so nothing of a concrete shape reaches the compile."""
        from cutlass.jax import TensorSpec

        swap = (0, 2, 1) if self.batch else (1, 0)
        rank = 3 if self.batch else 2
        out = []
        for o in [*(o for o in self.operands if o.role != "scalar"), self.out]:
            r = 1 if o.role.startswith("vec") else rank
            tma = o.role in ("a", "b", "out")
            div = (1,) * (r - 1) + (unit(o.jnp_dtype) if tma else 1,)
            transposed = (o.role == "a" and self.a_major != "k") or (o.role == "b" and self.b_major == "k")
            spec = TensorSpec(mode=swap if transposed else tuple(range(r)), static=False, ptr_assumed_align=TMA_BYTES,
                              divisibility=div)
            out.append((o.jnp_dtype, spec, div))
        return out

    def compile(self, variant: int | None, scalars: tuple[float, ...], max_clusters: int, extra: str = "") -> Any:
        """`cutlass.jax`'s ABI wrapper around this module's host function for one config, compiled for
        the module's arch (no GPU needed); `extra`: more compiler options (`--keep-cubin ...`)."""
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass.jax import compile as cj

        specs = self.tensor_specs()
        args = [cj.Arg(i, shape, dtype, spec) for i, (dtype, spec, shape) in enumerate(specs)]
        spec = cj.FunctionSpec(
            in_args=tuple(args[:-1]), input_tree=jax.tree.structure(tuple(range(len(args) - 1))),
            out_args=(cj.Arg(0, args[-1].shape, args[-1].dtype, args[-1].spec),), output_tree=jax.tree.structure((0,)),
            input_output_aliases=(), input_spec=tuple(a.spec for a in args[:-1]), output_spec=(args[-1].spec,),
            compile_options=compile_options(self.launcher.arch, False, extra), use_static_tensors=False,
            kwargs=(("variant", variant), ("max_clusters", max_clusters), ("scalars", scalars)),
        )
        with dsl_arch(self.launcher.arch):
            return cute.compile(jit_wrapper(), cuda.CUstream(0), *spec.get_compile_args(), wrapped_fn=self.host,
                                spec=spec, options=spec.compile_options)

    def object(self, variant: int | None, scalars: tuple[float, ...], max_clusters: int) -> bytes:
        """The object file the FFI target loads (the symbols cutlass.jax's runtime looks up)."""
        from cutlass.jax.compile import _EXPORT_PREFIX

        return bytes(self.compile(variant, scalars, max_clusters).dump_to_object(_EXPORT_PREFIX))

    def cache_path(self, variant: int | None, scalars: tuple[float, ...], max_clusters: int) -> Path:
        extra = hashlib.sha256(repr((scalars, max_clusters)).encode()).hexdigest()[:12]
        return cache_dir() / f"{self.launcher.key(variant)}-jax-{extra}.o"

    def module(self, variant: int | None, scalars: tuple[float, ...], max_clusters: int) -> tuple[bytes, bytes]:
        """(object, fingerprint) of one config: from this process, the disk cache, else compiled (once:
        concurrent lowerings of one config wait for the first)."""
        key = (variant, scalars, max_clusters)
        hit = self._compiled.get(key)
        if hit is not None:
            return hit
        with self._lock:
            if key not in self._compiled:
                path = self.cache_path(variant, scalars, max_clusters)
                try:
                    module = path.read_bytes()
                except OSError:
                    module = self.object(variant, scalars, max_clusters)
                    _write_atomic(path, module)
                self._compiled[key] = (module, hashlib.sha256(module).digest())
        return self._compiled[key]


def _write_atomic(path: Path, data: bytes) -> None:
    """Into the disk cache; a cache that cannot be written costs a compile per process, never a call."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


@functools.cache
def entry(launcher: CuteLauncher, host: Any, configs: tuple[Any, ...], operands: tuple[tuple[str, str, str], ...],
          a_major: str, b_major: str, batch: bool, out_dtype: str,
          variants: tuple[tuple[tuple[str, int], ...], ...], gated: str = "") -> CuteJaxEntry:
    """The module's entry, built on its first call (the generated `<name>_jax` passes its spec's data; `gated`: a
    gated epilogue's layout)."""
    return CuteJaxEntry(launcher, host, configs, tuple(Operand(*o) for o in operands), a_major, b_major, batch,
                        out_dtype, variants, gated)


def jit_wrapper() -> Any:
    """cutlass.jax's ABI wrapper (XLA buffer descriptors -> CuTe tensors -> the wrapped host function)."""
    from cutlass.jax.compile import jit_wrapper as wrapper

    return wrapper


# ---- the primitive: abstract eval everywhere, a CUDA lowering, a clear refusal elsewhere ------------
cute_call_p = jax.extend.core.Primitive("specgen_cute_call")


@cute_call_p.def_abstract_eval
def _abstract(*avals: Any, shape: tuple[int, ...], dtype: Any, **_: Any) -> Any:
    return avals[0].update(shape=shape, dtype=dtype)  # the inputs' varying mesh axes (equal: see _trace)


def gpu_devices() -> list[Any]:
    return [d for d in jax.local_devices() if d.platform == "gpu"]


def _cuda_lowering(ctx: Any, *operands: Any, entry: CuteJaxEntry, variant: int | None, scalars: tuple[float, ...],
                   shape: tuple[int, ...], dtype: Any) -> Any:
    from cutlass.jax import get_cutlass_call_ffi_name, get_cutlass_call_ffi_version, register_ffi

    devices = gpu_devices()
    want = entry.launcher.arch.removeprefix("sm_").rstrip("a")
    wrong = [d for d in devices if str(getattr(d, "compute_capability", want)).replace(".", "") != want]
    if wrong:
        raise RuntimeError(f"{entry.name}: compiled for {entry.launcher.arch}; device {wrong[0]} has compute "
                           f"capability {wrong[0].compute_capability}")
    # The grid's clusters on the smallest local device (a persistent config: one per cluster-size SMs).
    cfg = entry.configs[0 if variant is None else variant + 1]
    sms = min((int(getattr(d, "core_count", 0) or 0) for d in devices), default=0) or 132
    max_clusters = grid_clusters(cfg, sms)
    module, key = entry.module(variant, scalars, max_clusters)
    version = get_cutlass_call_ffi_version()
    register_ffi(version)
    call = jax.ffi.ffi_call(get_cutlass_call_ffi_name(True, version), jax.ShapeDtypeStruct(shape, dtype))
    return mlir.lower_fun(lambda *xs: [call(*xs, module=module, key=key)], multiple_results=True)(ctx, *operands)


def _refuse(ctx: Any, *_: Any, entry: CuteJaxEntry, **__: Any) -> Any:
    platforms = getattr(ctx.module_context, "platforms", ["this platform"])
    raise RuntimeError(f"{entry.name}: CuTe kernels run on a CUDA {entry.launcher.arch} device; this computation "
                       f"is being compiled for {', '.join(platforms)} (jax.eval_shape and jax.make_jaxpr work anywhere)")


def _no_jvp(primals: tuple, tangents: tuple, *, entry: CuteJaxEntry, **_: Any) -> Any:
    """No derivative rule yet: jax.grad, jax.vjp and jax.jvp raise when traced, naming the op and the arguments
    being differentiated (else jax's bare "Differentiation rule for 'specgen_cute_call' not implemented").
    A real rule replaces this one."""
    names = [o.name for o in entry.operands if o.role != "scalar"]
    raise _rt.derivative_error(entry.name, [n for n, t in zip(names, tangents, strict=True) if type(t) is not ad.Zero])


ad.primitive_jvps[cute_call_p] = _no_jvp
cute_call_p.def_impl(functools.partial(_dispatch.apply_primitive, cute_call_p))  # (bound only under jit: _trace)
mlir.register_lowering(cute_call_p, _cuda_lowering, platform="cuda")
for _platform in ("cpu", "tpu", "rocm"):
    mlir.register_lowering(cute_call_p, _refuse, platform=_platform)
