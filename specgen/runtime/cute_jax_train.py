"""The JAX entry's backward for CuTe sm90 modules with a `training` section: `<name>_jax` as a `jax.custom_vjp`
whose forward and backward run the module's own kernels (the torch side's: forward_pre or the plain forward, the
columns kernel, dgrad and wgrad with their TRAIN_CONFIGS roles), each one XLA custom call into the CuTe DSL's JAX
runtime as the forward entry's is (specgen/runtime/cute_jax.py: compiled once per kernel and config, shape-generic,
kept in memory and beside the torch launcher's objects on disk).

What differs from the forward entry: a call may have several outputs (forward_pre: out and pre; the columns pass:
G and its bands' f32 sums), and the arrays it runs on are zero-padded once to whole 16-byte rows in every dim
(M, N and K up to a multiple of 8 16-bit elements, an empty K to 16 zeros), so every GEMM's TMA reads and stores
them in place whatever the majors; the gradients are sliced back. Zero rows and columns add nothing to a product,
G is zero where dOut is, and the bias gradient's padded columns are dropped. Empty M or N: zeros, no kernel.

A gated epilogue (act(gate) * up, then at most a bias; B (2N, K) K-major): pre and G have B's 2N columns in the
forward's layout (halves or interleaved), each half padded on its own to the padded N (as the forward entry pads B),
the gated columns kernel forms G from the saved pre, dgrad and wgrad are the plain GEMMs over 2N, and the bias
gradient is dOut's column sum.

Batched (`batch = true`): every matrix has the batch first ((batch, rows, cols), each GEMM per batch: every batch its
own B), the vectors none; the columns pass reads the (batch, M_padded, cols) arrays as (batch M_padded, cols) rows (a
free reshape: the batches' zero rows add nothing), so the bias gradient is summed over every batch's rows in order;
another chain's pass likewise (a vector along m repeated for each batch, its row sums' partials added over the batches).

The differentiable function is built once per module (`differentiable`): jax.grad, jax.vjp and jax.value_and_grad
work under jax.jit and inside jax.shard_map, as the Pallas modules' do: every argument is cast to vary over the mesh
axes any one varies over (`specgen.runtime.jax.vary`), every call's inputs too (its outputs vary as they do), so the
backward's gradients have their primals' types and a replicated argument's gradient (B, the bias, with A's rows
sharded) is summed over the mesh by the cast's transpose, as jax's own autodiff of a replicated weight is; with
check_vma=False nothing varies and each shard gets its own gradients (docs/training/shard_map.md). The primal call (no
derivative asked) is the forward entry itself.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
from jax._src import dispatch as _dispatch
from jax.interpreters import mlir

from specgen.runtime import jax as _rt
from specgen.runtime.cute import cache_dir, compile_options, dsl_arch, grid_clusters
from specgen.runtime.cute_jax import (
    EMPTY_K,
    _write_atomic,
    concrete_scalar,
    gpu_devices,
    jit_wrapper,
    pad_to,
    round_up,
)

ROW_BYTES = 16  # every padded dim: whole 16-byte rows of a 16-bit dtype (TMA's strides, the columns pass's vectors)


@dataclass(frozen=True, eq=False)
class Kernel:
    """One of the backward's kernels as XLA calls it: the module's @cute.jit wrapper (stream, inputs, outputs,
    then its compile-time keywords), the launcher whose cache key names its objects, the config (the persistent
    grid's cap: None for the SIMT columns kernel) and each array's TensorSpec pieces: inputs then outputs, each
    (mode: the stored dims' order in the logical view, the stored contiguous extent's divisibility)."""

    name: str  # errors and the object's file name
    host: Any
    launcher: Any
    variant: str  # the wrapper's `variant` keyword (the role or the columns kernel's variant)
    config: Any  # the module's Config for the GEMMs (grid_clusters), None for the columns kernel
    layouts: tuple[tuple[tuple[int, ...], int], ...]
    scalars: bool = False  # the wrapper takes the chain's scalars (`scalars`, constants of the compile)
    _compiled: dict = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def specs(self, dtypes: tuple[Any, ...]) -> list:
        from cutlass.jax import TensorSpec
        from cutlass.jax.compile import Arg

        out = []
        for i, ((mode, div), dtype) in enumerate(zip(self.layouts, dtypes, strict=True)):
            shape = (1,) * (len(mode) - 1) + (div,)
            out.append(Arg(i, shape, jnp.dtype(dtype), TensorSpec(mode=mode, static=False, ptr_assumed_align=16,
                                                                    divisibility=shape)))
        return out

    def module(self, dtypes: tuple[Any, ...], n_in: int, max_clusters: int, scalars: tuple[float, ...] = ()
               ) -> tuple[bytes, bytes]:
        """(object, fingerprint) for these dtypes (and scalars): from this process, the disk cache, else compiled."""
        key = (dtypes, max_clusters, scalars)
        hit = self._compiled.get(key)
        if hit is not None:
            return hit
        with self._lock:
            if key not in self._compiled:
                named = (self.name, [str(d) for d in dtypes], max_clusters) + ((scalars,) if self.scalars else ())
                extra = hashlib.sha256(repr(named).encode()).hexdigest()[:12]
                path = cache_dir() / f"{self.launcher.key(self.variant)}-jaxtrain-{extra}.o"
                try:
                    module = path.read_bytes()
                except OSError:
                    module = self.compile(dtypes, n_in, max_clusters, scalars=scalars)
                    _write_atomic(path, module)
                self._compiled[key] = (module, hashlib.sha256(module).digest())
        return self._compiled[key]

    def compile(self, dtypes: tuple[Any, ...], n_in: int, max_clusters: int, extra: str = "",
                scalars: tuple[float, ...] = ()) -> bytes:
        """The wrapper compiled for the module's arch (no GPU needed), as cutlass.jax's runtime loads it."""
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass.jax import compile as cj
        from cutlass.jax.compile import _EXPORT_PREFIX

        args = self.specs(dtypes)
        ins, outs = args[:n_in], [cj.Arg(i, a.shape, a.dtype, a.spec) for i, a in enumerate(args[n_in:])]
        kwargs = (("variant", self.variant),) + ((("max_clusters", max_clusters),) if self.config is not None else ())
        kwargs += (("scalars", tuple(scalars)),) if self.scalars else ()
        spec = cj.FunctionSpec(
            in_args=tuple(ins), input_tree=jax.tree.structure(tuple(range(len(ins)))),
            out_args=tuple(outs), output_tree=jax.tree.structure(tuple(range(len(outs)))),
            input_output_aliases=(), input_spec=tuple(a.spec for a in ins), output_spec=tuple(a.spec for a in outs),
            compile_options=compile_options(self.launcher.arch, False, extra), use_static_tensors=False, kwargs=kwargs,
        )
        with dsl_arch(self.launcher.arch):
            compiled = cute.compile(jit_wrapper(), cuda.CUstream(0), *spec.get_compile_args(), wrapped_fn=self.host,
                                    spec=spec, options=spec.compile_options)
        return bytes(compiled.dump_to_object(_EXPORT_PREFIX))


# ---- the primitive: several outputs, a CUDA lowering, a clear refusal elsewhere ---------------------
cute_train_p = jax.extend.core.Primitive("specgen_cute_train_call")
cute_train_p.multiple_results = True


@cute_train_p.def_abstract_eval
def _abstract(*avals: Any, kernel: Kernel, outs: tuple[tuple[tuple[int, ...], Any], ...], scalars: tuple = ()) -> Any:
    return [avals[0].update(shape=shape, dtype=dtype) for shape, dtype in outs]  # every call has inputs


def _cuda_lowering(ctx: Any, *operands: Any, kernel: Kernel, outs: tuple, scalars: tuple = ()) -> Any:
    from cutlass.jax import get_cutlass_call_ffi_name, get_cutlass_call_ffi_version, register_ffi

    devices = gpu_devices()
    sms = min((int(getattr(d, "core_count", 0) or 0) for d in devices), default=0) or 132
    max_clusters = grid_clusters(kernel.config, sms) if kernel.config is not None else 0
    dtypes = tuple(jnp.dtype(a.dtype) for a in ctx.avals_in) + tuple(jnp.dtype(d) for _, d in outs)
    module, key = kernel.module(dtypes, len(operands), max_clusters, scalars)
    version = get_cutlass_call_ffi_version()
    register_ffi(version)
    call = jax.ffi.ffi_call(get_cutlass_call_ffi_name(True, version), [jax.ShapeDtypeStruct(s, d) for s, d in outs])
    return mlir.lower_fun(lambda *xs: list(call(*xs, module=module, key=key)), multiple_results=True)(ctx, *operands)


def _refuse(ctx: Any, *_: Any, kernel: Kernel, **__: Any) -> Any:
    platforms = getattr(ctx.module_context, "platforms", ["this platform"])
    raise RuntimeError(f"{kernel.name}: CuTe kernels run on a CUDA {kernel.launcher.arch} device; this computation "
                       f"is being compiled for {', '.join(platforms)} (jax.eval_shape and jax.make_jaxpr work anywhere)")


cute_train_p.def_impl(functools.partial(_dispatch.apply_primitive, cute_train_p))
mlir.register_lowering(cute_train_p, _cuda_lowering, platform="cuda")
for _platform in ("cpu", "tpu", "rocm"):
    mlir.register_lowering(cute_train_p, _refuse, platform=_platform)


def call(kernel: Kernel, ins: tuple[jax.Array, ...], outs: tuple[tuple[tuple[int, ...], Any], ...],
         scalars: tuple[float, ...] = ()) -> list[jax.Array]:
    """The kernel's outputs (shapes, dtypes) for these inputs (and a chain's scalars, compiled in), each cast to vary
    over the mesh axes any input varies over (under jax.shard_map; the abstract value takes the first input's)."""
    ins = _rt.vary(_rt.varying_axes(*ins), *ins)
    return cute_train_p.bind(*ins, kernel=kernel, outs=tuple((tuple(s), jnp.dtype(d)) for s, d in outs),
                             scalars=tuple(scalars) if kernel.scalars else ())


# ---- the differentiable entry -----------------------------------------------------------------------
SWAP, SAME = (1, 0), (0, 1)


@dataclass(frozen=True, eq=False)
class Backward:
    """What the generated module tells this one: its save mode, activation and bias, majors, dtypes, each role's
    GEMM (X and Y as the torch side names them: "a", "b.t()", "g", ...; whether it computes the gradient's
    transpose), and the @cute.jit wrappers (GEMMs: `gemm` for dgrad and wgrad, `fused` for forward_pre (out and pre) or
    recompute (G from dOut); the columns kernel: `cols`, `cols_sum`, `bands`)."""

    name: str
    save: str
    act: bool
    bias: bool
    a_major: str
    b_major: str
    dtype: str  # the operands' (and pre's, G's, out's) cutlass dtype name
    bias_dtype: str
    gemms: dict[str, tuple[str, str, bool]]
    hosts: dict[str, Any]
    train_launcher: Any
    cols_launcher: Any
    configs: dict[str, Any]  # TRAIN_CONFIGS
    bands: int  # GRAD_COLS_BANDS
    min_rows: int  # GRAD_COLS_MIN_ROWS
    gated: str = ""  # a gated epilogue's layout ("halves", "interleaved"): pre and G have B's 2N columns in it
    batch: bool = False  # batch = true: (batch, rows, cols) arrays, each GEMM per batch, the columns pass over all rows
    fp8: Any = None  # an fp8 forward: the fp8 columns kernel's launcher (`dtype` is then the output's, G's and pre's)
    # another chain: ((gradient, kind: matrix / cols / rows), ...), the chain pass's arguments in its order, whether
    # it forms G, whether it reads pre, its launcher
    chain: tuple = ()


def _jnp(name: str) -> Any:
    import cutlass
    from cutlass.jax import cutlass_to_jax_dtype

    return jnp.dtype(cutlass_to_jax_dtype(getattr(cutlass, name)))


def unit(bw: Backward) -> int:
    """Every padded dim's multiple: whole 16-byte rows of the narrowest array (fp8 operands: 16 elements)."""
    return ROW_BYTES // (1 if bw.fp8 else _jnp(bw.dtype).itemsize)


@functools.cache
def kernels(bw: Backward, roles: tuple[tuple[str, str], ...] = ()) -> dict[str, Kernel]:
    """The backward's kernels by role or columns variant, with each array's layout as XLA passes it (`roles`: a
    chain's arguments' (name, role), the forward entry's)."""
    u = unit(bw)
    vec = ((0,), 1)  # a vector (the bias, or the stub dgrad and wgrad pass for it): any extent

    def matrix(mode: tuple[int, int]) -> tuple[tuple[int, int], int]:
        return (mode, u)

    def gemm(role: str, host: str, layouts: tuple) -> Kernel:
        return Kernel(f"{bw.name}[{role}]", bw.hosts[host], bw.train_launcher, role, bw.configs[role], layouts,
                      bool(bw.chain))

    def cols(variant: str, host: str, layouts: tuple, launcher: Any = None) -> Kernel:
        return Kernel(f"{bw.name}[{variant}]", bw.hosts[host], launcher or bw.cols_launcher, variant, None, layouts)

    # stored layouts: a (M, K) when K-major, else (K, M); b (N, K) when K-major, else (K, N); g, pre, out (M, N);
    # batched: each with the batch first, the columns pass over (batch M, cols) rows
    same, swap = ((0, 1, 2), (0, 2, 1)) if bw.batch else (SAME, SWAP)
    a_mode, b_mode = (same if bw.a_major == "k" else swap), (swap if bw.b_major == "k" else same)
    stored_t = {"a": bw.a_major != "k", "b": bw.b_major == "k", "g": False}  # stored = the torch shape's transpose
    out: dict[str, Kernel] = {}

    def products(vectors: tuple) -> dict[str, Kernel]:
        """`out` with dgrad and wgrad, their X and Y in the stored majors, the vectors (stubs) as the GEMM takes them."""
        for role in ("dgrad", "wgrad"):
            x, y, _ = bw.gemms[role]
            mode = [swap if (s.endswith(".t()") != stored_t[s[0]]) else same for s in (x, y)]
            out[role] = gemm(role, "gemm", (matrix(mode[0]), matrix(mode[1]), *vectors, matrix(same)))
        return out

    if bw.chain:  # the GEMMs read every tensor argument (a residual element-wise), the chain pass its own
        kinds, chain_args, _, _, launcher = bw.chain
        role_of = dict(roles)
        tensors = tuple(vec if r.startswith("vec") else (same, 1) for _, r in roles if r != "scalar")
        if "forward_pre" in bw.configs:
            out["forward_pre"] = gemm("forward_pre", "fused", (matrix(a_mode), matrix(b_mode), *tensors, matrix(same), matrix(same)))
        if "recompute" in bw.configs:
            out["recompute"] = gemm("recompute", "pre", (matrix(a_mode), matrix(b_mode), *tensors, matrix(same)))
        ins = tuple({"vec_m": vec, "vec_n": (SAME, u), "matrix": matrix(SAME)}[role_of[n]] for n in chain_args
                    if role_of[n] != "scalar")
        out["chain_pass"] = Kernel(f"{bw.name}[chain_pass]", bw.hosts["chain"], launcher, "chain_pass", None,
                                   (matrix(SAME),) * 2 + ins + (matrix(SAME),) + ((SAME, u),) * len(kinds), True)
        out["grad_cols_bands"] = cols("grad_cols_bands", "bands", ((SAME, 1), (SAME, 1)))
        return products(tensors)
    bias_in = (vec,) * ((2 if bw.fp8 else 0) + (1 if bw.bias else 0))  # the vectors a GEMM reads (fp8: the scales first)
    if bw.fp8:  # G_b, G_a and U's bands' column sums from dOut (and pre) and the scales (scale_b a (1, N) row)
        if bw.act and bw.save == "recompute":  # pre stored as the fp8 kernel's output
            out["recompute"] = gemm("recompute", "pre", (matrix(a_mode), matrix(b_mode), *bias_in, matrix(same)))
        out["grad_cols_fp8"] = cols("grad_cols_fp8", "cols_fp8", (matrix(SAME),) * 2 + (vec, matrix(SAME)) +
                                    (matrix(SAME),) * 2 + ((SAME, u),), bw.fp8)
    if bw.act and bw.save == "preact":
        out["forward_pre"] = gemm("forward_pre", "fused", (matrix(a_mode), matrix(b_mode), *bias_in, matrix(same), matrix(same)))
    if bw.act and bw.save == "preact" and not bw.fp8:
        variant = "grad_cols_gated" if bw.gated else "grad_cols"  # gated: G's gate and up from dOut and pre's
        out["grad_cols"] = cols(variant, "cols", (matrix(SAME),) * 3 + ((SAME, u),))
    if bw.act and bw.save == "recompute" and not bw.fp8:  # dOut: read by TMA (16-byte rows: padded as every array here)
        out["recompute"] = gemm("recompute", "fused", (matrix(a_mode), matrix(b_mode), *bias_in, matrix(same), matrix(same)))
    if bw.bias and not bw.fp8:
        out["grad_cols_sum"] = cols("grad_cols_sum", "cols_sum", (matrix(SAME), (SAME, u)))
    if bw.bias:
        out["grad_cols_bands"] = cols("grad_cols_bands", "bands", ((SAME, 1), (SAME, 1)))
    return products(bias_in)


@functools.cache
def differentiable(entry: Any, bw: Backward) -> Any:
    """The module's forward entry as a jax.custom_vjp (built once per module)."""
    dtype = _jnp(bw.dtype)
    u = unit(bw)
    kern = kernels(bw, tuple((o.name, o.role) for o in entry.operands[2:]))
    names = tuple(o.name for o in entry.operands)  # a, b, (fp8: scale_a, scale_b), (the bias); a chain's arguments
    role = {o.name: o.role for o in entry.operands}
    vectors = tuple(n for n in names[2:] if role[n] != "scalar")  # what the GEMMs take as arrays
    scal = tuple(i for i, n in enumerate(names) if role[n] == "scalar")  # a chain's scalars: compiled in, no gradient

    def scalars(args: tuple) -> tuple[float, ...]:
        return tuple(concrete_scalar(bw.name, names[i], args[i]) for i in scal)

    def run(kernel: Kernel, ins: tuple, outs: tuple, sv: tuple[float, ...] = ()) -> list[jax.Array]:
        """`call`, a chain's scalars passed only where it has some."""
        return call(kernel, ins, outs, sv) if sv else call(kernel, ins, outs)

    def sizes(args: tuple) -> tuple[Any, dict[str, jax.Array]]:
        if len(args) != len(names):
            raise TypeError(f"{bw.name}: takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        return entry.problem(dict(zip(names, args, strict=True)))

    def padded(p: Any, named: dict[str, jax.Array]) -> tuple[tuple[int, int, int], dict[str, jax.Array]]:
        mp, np_, kp = round_up(p.m, u), round_up(p.n, u), round_up(p.k, u) if p.k else EMPTY_K
        lead = p.batch  # batched: (batch,), every matrix's first dim
        a = named["a"] if p.k else jnp.zeros(named["a"].shape, named["a"].dtype)  # an empty K: zeros (the kernels see 16)
        b = named["b"] if p.k else jnp.zeros(named["b"].shape, named["b"].dtype)
        if bw.gated:  # B (2N, K): each half padded on its own, to np_ rows (the forward entry's `pad_gated`)
            b = pad_to(b.reshape(lead + halves(p.n) + (p.k,)), lead + halves(np_) + (kp,)).reshape(lead + (2 * np_, kp))
        out = {"a": pad_to(a, lead + ((mp, kp) if bw.a_major == "k" else (kp, mp))),
               "b": b if bw.gated else pad_to(b, lead + ((np_, kp) if bw.b_major == "k" else (kp, np_)))}
        for o in entry.operands[2:]:  # the vectors (fp8: scale_a along M, then scale_b and the bias along N), a residual
            if o.role != "scalar":
                shape = lead + (mp, np_) if o.role == "matrix" else (mp if o.role == "vec_m" else np_,)
                out[o.name] = pad_to(named[o.name], shape)
        return (mp, np_, kp), out

    def halves(n: int) -> tuple[int, int]:
        """A gated B's 2N rows (or pre's and G's columns) as (2, N) halves or (N, 2) interleaved pairs."""
        return (2, n) if bw.gated == "halves" else (n, 2)

    def forward(*args: jax.Array) -> Any:
        p, named = sizes(args)
        arrays = tuple(x for i, x in enumerate(args) if i not in scal)  # the residuals: arrays only
        if "forward_pre" not in kern or p.m == 0 or p.n == 0 or 0 in p.batch:
            return entry(*args), (arrays, None)
        (mp, np_, _), x = padded(p, named)
        ins = (x["a"], x["b"], *(x[v] for v in vectors))
        pre, out = run(kern["forward_pre"], ins, ((p.batch + (mp, np_ * (2 if bw.gated else 1)), dtype),
                                                  (p.batch + (mp, np_), dtype)), scalars(args))
        return out[..., : p.m, : p.n], (arrays, pre)

    def backward(*rest: Any) -> tuple:
        fixed, ((arrays, pre), dout) = rest[:-2], rest[-2:]  # the scalars (nondiff_argnums) first
        given, it = dict(zip(scal, fixed, strict=True)), iter(arrays)
        args = tuple(given[i] if i in given else next(it) for i in range(len(names)))
        # each gradient varies as its primal does (under jax.shard_map: zeros of an empty shard are cast too); None
        # (an fp8 forward's scales: no gradient, jax.grad gives zeros); a scalar's none (not differentiated)
        grads = [g for i, g in enumerate(gradients(args, pre, dout)) if i not in scal]
        cast = iter(_rt.vary(_rt.varying_axes(*arrays), *(g for g in grads if g is not None)))
        return tuple(None if g is None else next(cast) for g in grads)

    def gradients(args: tuple, pre: Any, dout: jax.Array) -> tuple:
        p, named = sizes(args)
        zeros = tuple(None if i in scal else jnp.zeros(x.shape, dtype if bw.fp8 else x.dtype) for i, x in enumerate(args))
        if bw.fp8:  # the gradients of the dequantized operands (the output's dtype), the scales none
            zeros = (*zeros[:2], None, None, *zeros[4:])
        if p.m == 0 or p.n == 0 or 0 in p.batch:
            return zeros
        (mp, np_, kp), x = padded(p, named)
        lead = p.batch
        dout = pad_to(dout.astype(dtype), lead + (mp, np_))
        if bw.chain:
            return chain_gradients(p, args, x, pre, dout, (mp, np_, kp), zeros)
        bias_in = tuple(x[v] for v in vectors)  # what forward_pre and recompute read (fp8: the scales, then the bias)
        rows_all = mp * (lead[0] if lead else 1)  # the columns pass's rows: every batch's, the batches in order
        rows = max(bw.min_rows, -(-rows_all // bw.bands))
        sums = ((-(-rows_all // rows), np_), jnp.float32)
        partial = None
        n2 = np_ * (2 if bw.gated else 1)  # G's columns: B's (gated: gate and up, in the forward's layout)

        def flat(v: jax.Array) -> jax.Array:  # (batch, M, cols) as the columns pass reads it: (batch M, cols)
            return v.reshape(rows_all, v.shape[-1])

        if bw.fp8:  # G_b = U scale_b (dgrad's), G_a = scale_a U (wgrad's), U's column sums; U = dOut (* act'(pre))
            if bw.act and bw.save == "recompute":
                (pre,) = call(kern["recompute"], (x["a"], x["b"], *bias_in), ((lead + (mp, np_), dtype),))
            sa, sb = x[vectors[0]], x[vectors[1]]
            sa = jnp.tile(sa, lead[0]) if lead else sa  # the scales shared by the batches: scale_a for each batch's rows
            src = flat(dout)
            g_b, g_a, partial = call(kern["grad_cols_fp8"], (src, flat(pre) if bw.act else src, sa, sb.reshape(1, np_)),
                                     (((rows_all, np_), dtype),) * 2 + (sums,))
            g = None
            ops = {"dgrad": {"g": g_b.reshape(lead + (mp, np_)), "b": x["b"].astype(dtype)},  # 16-bit copies: exact
                   "wgrad": {"g": g_a.reshape(lead + (mp, np_)), "a": x["a"].astype(dtype)}}
        elif bw.act and bw.save == "preact":  # gated: partial is dOut's column sums (the bias after the gate)
            g, partial = call(kern["grad_cols"], (flat(dout), flat(pre)), (((rows_all, n2), dtype), sums))
            g = g.reshape(lead + (mp, n2))
        elif bw.act:
            (g,) = call(kern["recompute"], (x["a"], x["b"], *bias_in, dout), ((lead + (mp, n2), dtype),))
        else:
            g = dout
        grads = []
        stub = tuple(jnp.zeros((u,), v.dtype) for v in bias_in)  # dgrad and wgrad read no vector: any aligned one
        if not bw.fp8:
            ops = {role: {"a": x["a"], "b": x["b"], "g": g} for role in ("dgrad", "wgrad")}
        for role, (m_, q_) in (("dgrad", (mp, kp)), ("wgrad", (kp, n2))):
            xs, ys, transposed = bw.gemms[role]
            shape = (q_, m_) if transposed else (m_, q_)
            (c,) = call(kern[role], (ops[role][xs[0]], ops[role][ys[0]], *stub), ((lead + shape, dtype),))
            grads.append(c)
        da = grads[0][..., : p.m, : p.k] if bw.a_major == "k" else grads[0][..., : p.k, : p.m]
        if bw.gated:  # dB (2 np_, kp) in B's layout: each half sliced back to N rows
            at = tuple(slice(None) for _ in lead) + ((slice(None), slice(p.n)) if bw.gated == "halves" else (slice(p.n),))
            db = grads[1].reshape(lead + halves(np_) + (kp,))[at]
            db = db[..., : p.k].reshape(lead + (2 * p.n, p.k))
        else:
            db = grads[1][..., : p.n, : p.k] if bw.b_major == "k" else grads[1][..., : p.k, : p.n]
        dx = (da, db) if bw.fp8 else (da.astype(args[0].dtype), db.astype(args[1].dtype))
        dx = (*dx, None, None) if bw.fp8 else dx
        if not bw.bias:
            return dx
        if partial is None:  # G's column sums (gated: dOut's, the bias after the gate)
            (partial,) = call(kern["grad_cols_sum"], (flat(dout if bw.gated else g),), (sums,))
        (dbias,) = call(kern["grad_cols_bands"], (partial,), (((1, np_), _jnp(bw.bias_dtype)),))
        return (*dx, dbias[0, : p.n].reshape(args[-1].shape).astype(args[-1].dtype))

    def chain_gradients(p: Any, args: tuple, x: dict, pre: Any, dout: jax.Array, padded_mnk: tuple, zeros: tuple) -> tuple:
        """Another chain's: pre recomputed where the forward stored none, the chain pass (G and each argument's
        gradient: a residual's (M, N), a vector's f32 partials added in order by the bands kernel), dgrad and wgrad
        over G (or dOut). Batched: the chain pass over every batch's rows as one (batch M, N) matrix (a free reshape),
        a vector along m repeated for each batch, a row vector's partials (runs, batch M) added as (runs x batch, M)
        rows, run-major (the torch side's order), a column vector's over every batch's rows."""
        kinds, chain_args, forms_g, reads_pre, _ = bw.chain
        (mp, np_, kp), sv = padded_mnk, scalars(args)
        lead = p.batch
        rows_all = mp * (lead[0] if lead else 1)  # the chain pass's rows: every batch's, the batches in order
        dt = {o.name: o.jnp_dtype for o in entry.operands}
        tens = tuple(x[v] for v in vectors)
        if "recompute" in kern:
            (pre,) = run(kern["recompute"], (x["a"], x["b"], *tens), ((lead + (mp, np_), dtype),), sv)
        rows = max(bw.min_rows, -(-rows_all // bw.bands))
        vec = ROW_BYTES // dtype.itemsize  # the chain pass's columns a thread: a row vector's partials, one a run

        def flat(v: jax.Array) -> jax.Array:  # (batch, M, N) as the chain pass reads it: (batch M, N)
            return v.reshape(rows_all, v.shape[-1])

        def pass_arg(n: str) -> jax.Array:
            if role[n] == "vec_n":  # the (1, N padded) row
                return x[n].reshape(1, np_)
            return (jnp.tile(x[n], lead[0]) if lead else x[n]) if role[n] == "vec_m" else flat(x[n])

        kin = tuple(pass_arg(n) for n in chain_args if role[n] != "scalar")
        outs = (((rows_all, np_), dtype),) + tuple(((rows_all, np_), dt[n]) if k == "matrix" else
                                                   ((-(-rows_all // rows), np_) if k == "cols" else (np_ // vec, rows_all),
                                                    jnp.float32) for n, k in kinds)
        g, *bufs = run(kern["chain_pass"], (flat(dout), flat(pre if reads_pre else dout), *kin), outs, sv)
        g = g.reshape(lead + (mp, np_)) if forms_g else dout
        # dgrad and wgrad read no argument: aligned stubs (a residual's with the batch mode, its own extents)
        stub = tuple(jnp.zeros((u,) if role[n].startswith("vec") else (1,) * len(lead) + (1, u), dt[n]) for n in vectors)
        grads = []
        for r, (m_, q_) in (("dgrad", (mp, kp)), ("wgrad", (kp, np_))):
            xs, ys, transposed = bw.gemms[r]
            ops = {"a": x["a"], "b": x["b"], "g": g}
            (c,) = run(kern[r], (ops[xs[0]], ops[ys[0]], *stub), ((lead + ((q_, m_) if transposed else (m_, q_)), dtype),),
                       (0.0,) * len(sv))
            grads.append(c)
        da = grads[0][..., : p.m, : p.k] if bw.a_major == "k" else grads[0][..., : p.k, : p.m]
        db = grads[1][..., : p.n, : p.k] if bw.b_major == "k" else grads[1][..., : p.k, : p.n]
        got = {}
        for (n, k), buf in zip(kinds, bufs, strict=True):
            if k == "matrix":
                got[n] = buf.reshape(lead + (mp, np_))[..., : p.m, : p.n]
                continue
            part = buf.reshape(-1, mp) if k == "rows" and lead else buf  # each batch's rows: (runs x batch, M)
            (total,) = call(kern["grad_cols_bands"], (part,), (((1, part.shape[1]), jnp.float32),))  # in order
            got[n] = total[0, : p.n if k == "cols" else p.m]
        out = [da.astype(args[0].dtype), db.astype(args[1].dtype)]
        for i, n in enumerate(names[2:], 2):
            out.append(got[n].reshape(args[i].shape).astype(args[i].dtype) if n in got else zeros[i])
        return tuple(out)

    f = jax.custom_vjp(lambda *args: entry(*args), nondiff_argnums=scal)
    f.defvjp(forward, backward)

    def varying(*args: jax.Array) -> jax.Array:
        """Under jax.shard_map: every array argument cast to vary over the mesh axes any one does (the module
        docstring); a chain's scalars as they are (compiled in)."""
        if len(args) != len(names):
            raise TypeError(f"{bw.name}: takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        arrays = [x for i, x in enumerate(args) if i not in scal]
        cast = iter(_rt.vary(_rt.varying_axes(*arrays), *arrays))
        fixed = dict(zip(scal, scalars(args), strict=True))  # concrete numbers (a traced one: the entry's TypeError)
        return f(*(fixed[i] if i in scal else next(cast) for i, x in enumerate(args)))

    return varying
