"""The grouped Mosaic GPU module's training entry (its jax.custom_vjp) inside jax.shard_map, run as a script by
tests/backends/pallas/test_grouped_training_mgpu_shard.py in a subprocess with four CPU devices (the device count is
fixed when jax starts): `python3 grouped_mgpu_shard.py JOB OUT`; and the jnp models of the module's kernels (their
contracts: `stand_ins`), which the in-process glue test (test_grouped_training_mgpu.py) installs too.

The kernels run on a Hopper GPU only (Mosaic GPU has no interpreter), so for each case of JOB, in both vma modes:
- the real entry's step (jax.grad under jax.jit inside jax.shard_map) is traced and its psums counted, and (check_vma
  =True, the mode that types the arrays over the mesh) lowered for CUDA, every backward kernel named in the program;
- then the kernels are replaced by their jnp models and the step runs on the four CPU devices, its gradients saved.
JOB: a JSON list of cases {path (the rendered module), name, spec (its dict), inputs (an npz: a (S*m, K), b as stored,
bias (G, N), base (S*m, N), index (S, G), dout (S*m, N), an fp8 forward's scale_a (S*m,) and scale_b (G, N), in f32),
dtypes {a, b, bias, out}, bias, untouched, fp8}. An fp8 forward's scale_a is sharded with the rows, scale_b replicated
(neither differentiated). Each
shard holds its own m rows of A and dOut and its own group index (row s of `index`); B and the bias are replicated;
an untouched tail's caller `out` is sharded with the rows. The step (the grouped TPU shard test's):
- check_vma=True: jax.grad of the mesh's loss (psum of each shard's sum(out * dOut)): A's (and out's) gradient per
  shard, B's and the bias's summed over the mesh by the entry's casts' transposes;
- check_vma=False: jax.grad of each shard's loss; the step psums the replicated arguments' gradients itself.
OUT gets each mode's gradients (f32, npz) and OUT.json each mode's psum count and the kernels the lowering names."""

from __future__ import annotations

import json
import re
import sys

import numpy as np

ROLES = ("_forward_pre", "_recompute", "_dgrad", "_wgrad")


# ---- jnp models of the kernels' contracts (f32 products, each store rounded to its dtype) --------------------
def _groups(sizes, m: int):
    """(m,) each row's group, G past the last group."""
    import jax.numpy as jnp

    return jnp.searchsorted(jnp.minimum(jnp.cumsum(jnp.maximum(sizes, 0)), m), jnp.arange(m), side="right")


def ragged_m(sizes, x, y, y_major: str, out_dtype, tail_zero: bool, bias=None):
    """The ragged-M kernel's contract: out[rows of g] = x[rows] @ B[g] (+ bias[g]), y as stored (G, N, K) K-major or
    (G, K, N); rows past the last group 0 (tail zero) or NaN (untouched: unspecified, never to be read)."""
    import jax.numpy as jnp

    m = x.shape[0]
    groups = _groups(sizes, m)
    w = (jnp.swapaxes(y, 1, 2) if y_major == "k" else y).astype(jnp.float32)  # (G, K, N)
    g = jnp.minimum(groups, y.shape[0] - 1)
    acc = jnp.einsum("mk,mkn->mn", x.astype(jnp.float32), w[g])
    if bias is not None:
        acc = acc + bias.reshape(y.shape[0], -1)[g].astype(jnp.float32)
    inside = (groups < y.shape[0])[:, None]
    return jnp.where(inside, acc, 0.0 if tail_zero else jnp.nan).astype(out_dtype)


def ragged_k(sizes, x, y, out_dtype):
    """The ragged-K kernel's contract: out[g] = x[rows of g]^T @ y[rows of g], x (M, P), y (M, Q); an empty group's 0."""
    import jax.numpy as jnp

    m, g = x.shape[0], sizes.shape[0]
    onehot = (_groups(sizes, m)[None, :] == jnp.arange(g)[:, None]).astype(jnp.float32)  # (G, M)
    return jnp.einsum("gm,mp,mq->gpq", onehot, x.astype(jnp.float32), y.astype(jnp.float32)).astype(out_dtype)


def layout(spec: dict) -> str:
    """A gated form's layout ("" for a plain chain)."""
    return spec["epilogue"][0]["layout"] if spec["epilogue"] and spec["epilogue"][0]["op"] == "gated" else ""


def act_fn(name: str):
    import jax

    return {"gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True), "silu": jax.nn.silu, "relu": jax.nn.relu}[name]


def stand_ins(mod, spec: dict, set_attr) -> None:
    """Replace the module's kernels (the forward's `_forward`, `_pre_call`, `_dgrad_call`, `_wgrad_call`) by their jnp
    models; `set_attr(module, name, value)` (monkeypatch.setattr in a test, setattr in the script). An fp8 forward's
    forward and pre take the scales (scale_a (M,), scale_b (G, N)) after B; dgrad and wgrad, 16-bit kernels, refuse
    an operand of another dtype than the output's (the module converts the 8-bit A and B before them)."""
    import jax.numpy as jnp

    gemms = mod.METADATA["training"]["gemms"]
    dt = jnp.dtype({"bf16": jnp.bfloat16, "f16": jnp.float16}[spec["out"]["dtype"]])  # the backward's operands'
    gated = layout(spec)
    fn = next((op["fn"] for op in spec["epilogue"] if op["op"] in ("activation", "gated")), "")
    fp8 = spec["a"]["dtype"].startswith("fp8")

    def scaled(sizes, a, b, scales, bias, out_dtype, tail_zero):
        """pre = scale_a scale_b[g] (A @ B[g]) (+ bias[g]) for an fp8 forward, else A @ B[g] (+ bias[g])."""
        if not fp8:
            return ragged_m(sizes, a, b, spec["b"]["major"], out_dtype, tail_zero, *bias)
        scale_a, scale_b = scales
        m, g = a.shape[0], b.shape[0]
        x = ragged_m(sizes, a, b, spec["b"]["major"], jnp.float32, tail_zero)
        x = x * scale_a.reshape(m, 1) * scale_b.reshape(g, -1)[jnp.minimum(_groups(sizes, m), g - 1)]
        if bias:
            x = x + bias[0].reshape(g, -1)[jnp.minimum(_groups(sizes, m), g - 1)].astype(jnp.float32)
        return x.astype(out_dtype)

    def forward(cfg, varying, sizes, a, b, *rest):
        *bias, out = rest
        scales, bias = (bias[:2], bias[2:]) if fp8 else ((), bias)
        m = a.shape[0]
        x = scaled(sizes, a, b, scales, [] if gated else bias, jnp.float32, True)
        if gated:  # act(gate) * up, then the bias
            n = x.shape[1] // 2
            gate, up = (x[:, :n], x[:, n:]) if gated == "halves" else (x[:, 0::2], x[:, 1::2])
            x = act_fn(fn)(gate) * up
            if bias:
                x = x + bias[0].reshape(b.shape[0], -1)[jnp.minimum(_groups(sizes, m), b.shape[0] - 1)].astype(jnp.float32)
        elif fn:
            x = act_fn(fn)(x)
        rows = jnp.arange(m)[:, None] < jnp.minimum(jnp.sum(jnp.maximum(sizes, 0)), m)
        return jnp.where(rows, x, 0.0 if out is None else out.astype(jnp.float32)).astype(dt)

    pre_dtype = dt if "forward_pre" in gemms else jnp.float32
    set_attr(mod, "_forward", forward)
    if "forward_pre" in gemms or "recompute" in gemms:
        set_attr(mod, "_pre_call", lambda varying, sizes, x, y, *args: scaled(
            sizes, x, y, args[:2] if fp8 else (), list(args[2:] if fp8 else args), pre_dtype, False))

    def sixteen(x, y):  # wgmma's 16-bit MN-major operands: both of the output's dtype (an fp8 forward's converted)
        assert x.dtype == y.dtype == dt, (x.dtype, y.dtype, dt)

    set_attr(mod, "_dgrad_call", lambda varying, sizes, x, y: sixteen(x, y) or ragged_m(
        sizes, x, y, gemms["dgrad"]["b_major"], dt, True))
    set_attr(mod, "_wgrad_call", lambda varying, sizes, x, y: sixteen(x, y) or ragged_k(sizes, x, y, dt))


# ---- the shard_map step --------------------------------------------------------------------------------------
def local_loss(fn, case: dict):
    """One shard's loss sum(fn(...) * dOut) from (a, b, [bias], [out], index (1, G), dout, [scale_a, scale_b]): the
    entry `fn` (the module's `_call`) over the shard's ragged batch."""
    import jax.numpy as jnp

    n_diff = 2 + case["bias"] + case["untouched"]

    def local(*xs):
        a, b, rest, (index, dout, *scales) = xs[0], xs[1], list(xs[2:n_diff]), xs[n_diff:]
        bias = (rest.pop(0),) if case["bias"] else ()
        out = rest.pop(0) if case["untouched"] else None
        y = fn(a, b, index.reshape(-1), *scales, *bias, out)
        return jnp.sum(y.astype(jnp.float32) * dout)

    return local


def step_fn(fn, case: dict, check_vma: bool):
    """The shard_map body: the gradients of (a, b, [bias], [out]) from (a, b, [bias], [out], index, dout)."""
    import jax

    local = local_loss(fn, case)
    argnums = tuple(range(2 + case["bias"] + case["untouched"]))
    replicated = (1, *((2,) if case["bias"] else ()))  # b, [bias]

    def step(*xs):
        if check_vma:
            return jax.grad(lambda *ys: jax.lax.psum(local(*ys), "x"), argnums=argnums)(*xs)
        grads = jax.grad(local, argnums=argnums)(*xs)
        return tuple(jax.lax.psum(g, "x") if i in replicated else g for i, g in enumerate(grads))

    return step


def main(job: str, out: str) -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from specgen.compile import load_rendered

    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    rows = P("x", None)
    results, psums, lowered = {}, {}, {}
    with open(job) as fh:
        cases = json.load(fh)
    for i, case in enumerate(cases):
        mod = load_rendered(case["path"], f"_grouped_mgpu_shard_{i}_{case['name']}")
        data, dt = np.load(case["inputs"]), case["dtypes"]
        arrays, specs = [jnp.asarray(data["a"], dt["a"]), jnp.asarray(data["b"], dt["b"])], [rows, P()]
        if case["bias"]:
            arrays.append(jnp.asarray(data["bias"], dt["bias"]))
            specs.append(P())
        if case["untouched"]:
            arrays.append(jnp.asarray(data["base"], dt["out"]))
            specs.append(rows)
        n_diff = len(arrays)
        arrays += [jnp.asarray(data["index"], jnp.int32), jnp.asarray(data["dout"], jnp.float32)]
        specs += [rows, rows]
        if case.get("fp8"):  # scale_a with the rows, scale_b replicated
            arrays += [jnp.asarray(data["scale_a"], jnp.float32), jnp.asarray(data["scale_b"], jnp.float32)]
            specs += [P("x"), P()]
        placed = [jax.device_put(x, NamedSharding(mesh, s)) for x, s in zip(arrays, specs, strict=True)]
        psums[case["name"]] = []

        def build(module, check_vma: bool, case: dict = case, specs: tuple = tuple(specs), n_diff: int = n_diff):
            return jax.jit(jax.shard_map(step_fn(module._call, case, check_vma), mesh=mesh, in_specs=specs,
                                         out_specs=specs[:n_diff], check_vma=check_vma))

        for check_vma in (True, False):  # the real kernels: traced; lowered for CUDA with check_vma=True
            traced = build(mod, check_vma).trace(*placed)
            psums[case["name"]].append(len(re.findall(r"\bpsum\w*\[", str(traced.jaxpr))))
            if check_vma:
                text = traced.lower(lowering_platforms=("cuda",)).as_text()
                lowered[case["name"]] = sorted(r for r in ROLES if f"{case['name']}{r}" in text)
        # the kernels' models in a fresh copy of the module (no trace of the real kernels cached): the step runs on
        # the CPU devices
        model = load_rendered(case["path"], f"_grouped_mgpu_shard_model_{i}_{case['name']}")
        stand_ins(model, case["spec"], setattr)
        for check_vma in (True, False):
            for j, g in enumerate(build(model, check_vma)(*placed)):
                results[f"{case['name']}/{check_vma}/{j}"] = np.asarray(jnp.asarray(g, jnp.float32))
    np.savez(out, **results)
    with open(out + ".json", "w") as fh:
        json.dump({"psums": psums, "lowered": lowered}, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
