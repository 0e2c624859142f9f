"""jax.grad of a training module's JAX entry (its jax.custom_vjp) inside jax.shard_map, shared by the CPU tests
(tests/backends/pallas/test_training_mgpu_shard.py, tests/backends/cute/test_cute_training_shard.py: four CPU devices
in a subprocess, each kernel replaced by a jnp model of its contract, since the kernels run on a Hopper GPU only) and
the GPU test (tests/gpu/test_training_shard_gpu.py: the real kernels on a one-device mesh).

The step (`sharded_grads`): A's M rows and dOut's sharded over the mesh axis "x", B and the bias replicated.
- check_vma=True (jax.shard_map's default): the loss is psum'd over "x" and the gradients come back as jax's own
  autodiff gives them: A's per shard, B's and the bias's already summed over the mesh (replicated: out_specs P()).
- check_vma=False: each shard's loss and each shard's gradients; the step sums the replicated weights' gradients
  itself (jax.lax.psum), as any shard_map step without vma checking does.

Run as a script (`python3 shard_grads.py JOB OUT`): JOB a JSON list of cases {kind: "cute" | "mgpu", path, spec,
shape, modes: the check_vma values}; for each, the real entry's gradient program is traced under shard_map over every
device in each mode (Mosaic GPU: also lowered for CUDA, each role's kernel named in it), then the kernels are replaced
by their models and the gradients computed; OUT gets them (f32, npz) and the traced kernels (json)."""

from __future__ import annotations

import json
import re
import sys

import numpy as np

ACTS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid")


def act_fn(name: str):
    import jax

    return {"": lambda v: v, "relu": jax.nn.relu, "gelu": lambda v: jax.nn.gelu(v, approximate=False),
            "gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True), "silu": jax.nn.silu, "sigmoid": jax.nn.sigmoid}[name]


def form(spec: dict) -> tuple[str, str, bool]:
    """(activation or gated fn, gated layout or "", bias) of a training spec."""
    op = next((o for o in spec["epilogue"] if o["op"] in ("activation", "gated")), {})
    return op.get("fn", ""), op.get("layout", "") if op.get("op") == "gated" else "", any(
        o["op"] == "bias" for o in spec["epilogue"])


def inputs(spec: dict, shape, seed: int = 0):
    """A, B (2N columns where gated), the bias where the spec has one, and dOut, in the stored layouts (bf16)."""
    import jax.numpy as jnp

    M, N, K = shape
    _, gated, bias = form(spec)
    bn = 2 * N if gated else N
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K) if spec["a"]["major"] == "k" else (K, M)) / np.sqrt(max(K, 1))
    b = rng.standard_normal((bn, K) if spec["b"]["major"] == "k" else (K, bn))
    args = [jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16)]
    if bias:
        args.append(jnp.asarray(rng.standard_normal(N), jnp.bfloat16))
    return args, jnp.asarray(rng.standard_normal((M, N)), jnp.bfloat16)


def sharded_grads(fn, args, dout, spec: dict, mesh, check_vma: bool):
    """jax.grad of <fn(*args), dOut> in every argument inside jax.shard_map (the module docstring's step), jitted."""
    from jax.sharding import PartitionSpec as P

    a_spec = P("x", None) if spec["a"]["major"] == "k" else P(None, "x")
    in_specs = (a_spec, P(), *([P()] if len(args) > 2 else []), P("x", None))
    return shard_step(fn, [*args, dout], in_specs, mesh, check_vma)


def shard_step(fn, arrays: list, parts, mesh, check_vma: bool):
    """The jitted step over mesh axis "x" and the arrays placed: jax.grad of <fn(*arrays[:-1]), arrays[-1]> (dOut last)
    in every argument, `parts` each array's PartitionSpec. check_vma=True: the loss psum'd over the mesh, a replicated
    argument's gradient comes back summed; False: each shard's gradients, a replicated argument's psum'd by the step."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    parts = tuple(parts)
    argnums = tuple(range(len(arrays) - 1))

    def local(*xs):
        return jnp.sum(fn(*xs[:-1]).astype(jnp.float32) * xs[-1].astype(jnp.float32))

    def step(*xs):
        if check_vma:  # the mesh's loss; a replicated argument's gradient comes back summed (jax's own rule)
            return jax.grad(lambda *ys: jax.lax.psum(local(*ys), "x"), argnums=argnums)(*xs)
        grads = jax.grad(local, argnums=argnums)(*xs)  # each shard's: the step sums a replicated argument's
        return tuple(g if any(parts[i]) else jax.lax.psum(g, "x") for i, g in enumerate(grads))

    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=parts, out_specs=parts[:-1], check_vma=check_vma))
    return f, [jax.device_put(x, NamedSharding(mesh, s)) for x, s in zip(arrays, parts, strict=True)]


# ---- jnp models of the kernels' contracts (f32 products, each store rounded to its dtype) --------------------
def _split(v, layout: str):
    n = v.shape[-1] // 2
    return (v[:, :n], v[:, n:]) if layout == "halves" else (v[:, 0::2], v[:, 1::2])


def _join(gate, up, layout: str):
    import jax.numpy as jnp

    return jnp.concatenate([gate, up], axis=1) if layout == "halves" else jnp.stack([gate, up], axis=2).reshape(
        gate.shape[0], -1)


def _deriv(act):
    import jax
    import jax.numpy as jnp

    return jax.grad(lambda v: jnp.sum(act(v)))


def _primal(spec: dict):
    """out of the forward entry from the stored, unpadded arrays."""
    import jax.numpy as jnp

    fn, gated, bias = form(spec)
    act = act_fn(fn)

    def out(a, b, *rest):
        x = (a if spec["a"]["major"] == "k" else a.T).astype(jnp.float32)
        w = (b.T if spec["b"]["major"] == "k" else b).astype(jnp.float32)
        acc = x @ w
        if gated:
            gate, up = _split(acc, gated)
            res = act(gate) * up + (rest[0].astype(jnp.float32) if bias else 0.0)
        else:
            res = act(acc + (rest[0].astype(jnp.float32) if bias else 0.0))
        return res.astype(a.dtype)

    return out


def install_cute_model(mod, spec: dict) -> None:
    """specgen.runtime.cute_jax_train.call (every backward kernel) and the forward entry's traced call as models."""
    import jax
    import jax.numpy as jnp

    from specgen.runtime import cute_jax_train as jt

    fn, gated, _ = form(spec)
    act, f32 = act_fn(fn), jnp.float32

    def logical(x, layout):  # a GEMM operand as the kernel reads it: SWAP marks the stored transpose
        return x.T if tuple(layout[0]) == jt.SWAP else x

    def bands(v, count: int):  # a column sum per band of rows (the bands are added in order after)
        rows = -(-v.shape[0] // count)
        return jnp.pad(v, ((0, count * rows - v.shape[0]), (0, 0))).reshape(count, rows, -1).sum(axis=1)

    def call(kernel, ins, outs):
        v, ly = kernel.variant, kernel.layouts
        if v in ("dgrad", "wgrad", "forward_pre", "recompute"):
            acc = logical(ins[0], ly[0]).astype(f32) @ logical(ins[1], ly[1]).astype(f32)
        if v in ("dgrad", "wgrad"):
            res = [acc]
        elif v == "forward_pre":
            if gated:
                gate, up = _split(acc, gated)
                res = [acc, act(gate) * up + (ins[2].astype(f32) if len(ins) > 2 else 0.0)]
            else:
                pre = acc + (ins[2].astype(f32) if len(ins) > 2 else 0.0)
                res = [pre, act(pre)]
        elif v == "recompute":
            d = ins[-1].astype(f32)
            if gated:
                gate, up = _split(acc, gated)
                res = [_join(d * up * _deriv(act)(gate), d * act(gate), gated)]
            else:
                res = [d * _deriv(act)(acc + (ins[2].astype(f32) if len(ins) > 3 else 0.0))]
        elif v in ("grad_cols", "grad_cols_gated"):
            d, pre = ins[0].astype(f32), ins[1].astype(f32)
            if gated:
                gate, up = _split(pre, gated)
                g = _join(d * up * _deriv(act)(gate), d * act(gate), gated).astype(outs[0][1])
                res = [g, bands(d, outs[1][0][0])]
            else:
                g = (d * _deriv(act)(pre)).astype(outs[0][1])
                res = [g, bands(g.astype(f32), outs[1][0][0])]
        elif v == "grad_cols_sum":
            res = [bands(ins[0].astype(f32), outs[0][0][0])]
        else:  # grad_cols_bands
            res = [jnp.sum(ins[0], axis=0, keepdims=True)]
        assert [tuple(r.shape) for r in res] == [tuple(s) for s, _ in outs], (kernel.name, [r.shape for r in res], outs)
        return [r.astype(d) for r, (_, d) in zip(res, outs, strict=True)]

    _REAL.setdefault("call", jt.call)
    jt.call = call  # every module's: main puts the real one back after the case (uninstall_cute_model)
    entry = mod._jax_entry()
    out = _primal(spec)
    entry._jitted = jax.jit(lambda *arrays, scalars: out(*arrays), static_argnames=("scalars",))


def uninstall_cute_model() -> None:
    from specgen.runtime import cute_jax_train as jt

    jt.call = _REAL.get("call", jt.call)


_REAL: dict = {}


def install_mgpu_model(mod, spec: dict) -> None:
    """The Mosaic GPU module's `_gemm` (every backward GEMM), `_launch` (the forward) and preact's `_grad_cols` (a
    Pallas Triton kernel: Pallas' interpreter pads a ragged block with an unvarying value, which jax 0.10 refuses
    under check_vma; its numerics: test_training_mgpu.py) as models."""
    import jax.numpy as jnp

    fn, gated, bias = form(spec)
    act, f32 = act_fn(fn), jnp.float32

    def mm(x, y, x_k, y_k):
        return jnp.matmul((x if x_k else x.T).astype(f32), (y.T if y_k else y).astype(f32))

    def gemm(role, m, n, k, x, y, *extra):
        _, x_k, y_k, transposed, dtype = mod.TRAIN_GEMMS[role]
        if role not in ("forward_pre", "recompute"):
            c = mm(x, y, x_k, y_k)
            return (c.T if transposed else c).astype(dtype)
        if gated:  # B's gate and up through the module's own view; pre / G as (M, 2, N)
            v = mod._gated_view(y, n, k)
            halves = (v[0], v[1]) if spec["b"]["major"] == "k" and gated == "halves" else (v[:, 0], v[:, 1])
            gate, up = (mm(x, h, x_k, y_k) for h in halves)
            if role == "forward_pre":
                out = act(gate) * up + (extra[0].astype(f32) if bias else 0.0)
                return out.astype(dtype), jnp.stack([gate, up], axis=1).astype(dtype)
            d = extra[-1].astype(f32)
            return jnp.stack([d * up * _deriv(act)(gate), d * act(gate)], axis=1).astype(dtype)
        pre = mm(x, y, x_k, y_k) + (extra[0].astype(f32) if bias else 0.0)
        if role == "forward_pre":
            return act(pre).astype(dtype), pre.astype(dtype)
        return (extra[-1].astype(f32) * _deriv(act)(pre)).astype(dtype)

    def grad_cols(grad, pre):  # G in B's layout (gated: dgate, dup from pre (M, 2, N)) and dbias (f32)
        d = grad.astype(f32)
        if gated:
            gate, up = pre[:, 0].astype(f32), pre[:, 1].astype(f32)
            g = _join(d * up * _deriv(act)(gate), d * act(gate), gated).astype(grad.dtype)
            return g, jnp.sum(d, axis=0) if bias else None
        g = (d * _deriv(act)(pre.astype(f32))).astype(grad.dtype)
        return g, jnp.sum(g.astype(f32), axis=0) if bias else None

    mod._gemm = gemm
    mod._launch = _primal(spec)
    mod._grad_cols = grad_cols


# ---- the subprocess ----------------------------------------------------------------------------------------------
def _traced(case: dict, mod, fn, args, dout, mesh) -> list:
    """The real entry's gradient program under shard_map in each of the case's vma modes: the kernels it calls (Mosaic
    GPU: lowered for CUDA, each role kernel's name in the text; CuTe: traced, each XLA call's kernel name), and its
    number of psums (the loss's with check_vma, one per replicated argument: a kernel output typed as not varying
    adds one, its cotangent summed over the mesh)."""
    found = []
    for check_vma in case["modes"]:
        f, placed = sharded_grads(fn, args, dout, case["spec"], mesh, check_vma)
        traced = f.trace(*placed)
        jaxpr = str(traced.jaxpr)
        psums = len(re.findall(r"\bpsum\w*\[", jaxpr))
        if case["kind"] == "mgpu":
            text = traced.lower(lowering_platforms=("cuda",)).as_text()
            found.append([sorted(r for r in [*mod.TRAIN_GEMMS, "grad_cols"] if f"{case['spec']['name']}_{r}" in text), psums])
        else:
            found.append([sorted({e.split("]")[0] for e in jaxpr.split(f"{case['spec']['name']}[")[1:]}), psums])
    return found


def main(job: str, out: str) -> None:
    import jax

    from specgen.compile import load_rendered

    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    results, kernels = {}, {}
    with open(job) as fh:
        job_cases = json.load(fh)
    for i, case in enumerate(job_cases):
        name = case["spec"]["name"]
        args, dout = inputs(case["spec"], tuple(case["shape"]))
        mod = load_rendered(case["path"], f"_shard_{i}_{name}")
        kernels[name] = _traced(case, mod, getattr(mod, f"{name}_jax") if case["kind"] == "cute" else mod._call,
                                args, dout, mesh)
        # the models on a second import: jax's trace caches key on the functions, which a new module renews
        mod = load_rendered(case["path"], f"_shard_model_{i}_{name}")
        (install_cute_model if case["kind"] == "cute" else install_mgpu_model)(mod, case["spec"])
        fn = getattr(mod, f"{name}_jax") if case["kind"] == "cute" else mod._call
        for check_vma in case["modes"]:
            f, placed = sharded_grads(fn, args, dout, case["spec"], mesh, check_vma)
            for j, g in enumerate(f(*placed)):
                results[f"{name}/{check_vma}/{j}"] = np.asarray(g, np.float32)
        if case["kind"] == "cute":
            uninstall_cute_model()
    np.savez(out, **results)
    with open(out + ".json", "w") as fh:
        json.dump(kernels, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
