"""jax.grad of the grouped Pallas TPU module's JAX entry (its jax.custom_vjp) inside jax.shard_map, run as a script
by tests/backends/pallas/test_grouped_training_tpu_shard.py in a subprocess with four CPU devices (the device count is
fixed when jax starts): `python3 grouped_tpu_shard.py JOB OUT`.

JOB: a JSON list of cases {path (the rendered module), name, inputs (an npz: a (S*m, K), b as stored, bias (G, N),
base (S*m, N), index (S, G), dout (S*m, N), and with `scales` scale_a (S*m,) and scale_b (G, N), in f32), dtypes {a,
b, bias, out}, bias, untouched, scales (an fp8 forward's rowwise scales, passed after the index)}. Each shard holds
its own m rows of A, dOut and scale_a and its own group index (row s of `index`: its ragged batch); B, scale_b and the
bias are replicated; an untouched tail's caller `out` is sharded with the rows. The step, in both vma modes:
- check_vma=True: jax.grad of the mesh's loss (psum of each shard's sum(out * dOut)): A's (and out's, scale_a's)
  gradient per shard, B's and the bias's as jax's own autodiff gives a replicated weight's, summed over the mesh
  already (scale_b's: the rule's None, a symbolic zero that takes no psum);
- check_vma=False: jax.grad of each shard's loss; the step psums the replicated arguments' gradients itself.
OUT gets each mode's gradients (f32, npz) and OUT.json the number of psums in each mode's jaxpr (the loss's with
check_vma=True, one per replicated argument with a gradient: a kernel output typed as not varying would add one, its
cotangent summed over the mesh), the gradients' dtypes as the step returns them (check_vma=True), and the backward
kernels named in the native entry's step (interpret=False, check_vma=True) lowered for TPU."""

from __future__ import annotations

import functools
import json
import re
import sys

import numpy as np


def step_fn(fn, case: dict, check_vma: bool):
    """The shard_map body: (the gradients of a, b, [scale_a, scale_b], [bias], [out]) from (a, b, [scale_a,
    scale_b], [bias], [out], index, dout)."""
    import jax
    import jax.numpy as jnp

    scales = 2 * case["scales"]
    n_diff = 2 + scales + case["bias"] + case["untouched"]

    def local(*xs):
        a, b, rest, (index, dout) = xs[0], xs[1], list(xs[2:n_diff]), xs[n_diff:]
        scale = tuple(rest.pop(0) for _ in range(scales))
        bias = (rest.pop(0),) if case["bias"] else ()
        out = {"out": rest.pop(0)} if case["untouched"] else {}
        y = fn(a, b, index.reshape(-1), *scale, *bias, **out)
        return jnp.sum(y.astype(jnp.float32) * dout)

    argnums = tuple(range(n_diff))
    replicated = (1, *((3,) if scales else ()), *((2 + scales,) if case["bias"] else ()))  # b, [scale_b], [bias]

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
    results, psums, dtypes, lowered = {}, {}, {}, {}
    with open(job) as fh:
        cases = json.load(fh)
    for i, case in enumerate(cases):
        mod = load_rendered(case["path"], f"_grouped_shard_{i}_{case['name']}")
        fn = getattr(mod, case["name"])
        data, dt = np.load(case["inputs"]), case["dtypes"]
        arrays = [jnp.asarray(data["a"], dt["a"]), jnp.asarray(data["b"], dt["b"])]
        specs = [rows, P()]
        if case["scales"]:
            arrays += [jnp.asarray(data["scale_a"], jnp.float32), jnp.asarray(data["scale_b"], jnp.float32)]
            specs += [P("x"), P()]
        if case["bias"]:
            arrays.append(jnp.asarray(data["bias"], dt["bias"]))
            specs.append(P())
        if case["untouched"]:
            arrays.append(jnp.asarray(data["base"], dt["out"]))
            specs.append(rows)
        arrays += [jnp.asarray(data["index"], jnp.int32), jnp.asarray(data["dout"], jnp.float32)]
        specs += [rows, rows]
        placed = [jax.device_put(x, NamedSharding(mesh, s)) for x, s in zip(arrays, specs, strict=True)]
        psums[case["name"]] = []
        for check_vma in (True, False):
            f = jax.jit(jax.shard_map(step_fn(fn, case, check_vma), mesh=mesh, in_specs=tuple(specs),
                                      out_specs=tuple(specs[:-2]), check_vma=check_vma))
            psums[case["name"]].append(len(re.findall(r"\bpsum\w*\[", str(f.trace(*placed).jaxpr))))
            grads = f(*placed)
            if check_vma:
                dtypes[case["name"]] = [str(g.dtype) for g in grads]
            for j, g in enumerate(grads):
                results[f"{case['name']}/{check_vma}/{j}"] = np.asarray(jnp.asarray(g, jnp.float32))
        # the native entry's step (check_vma=True) lowered for TPU: each backward kernel's Mosaic call, by name
        native = jax.jit(jax.shard_map(step_fn(functools.partial(fn, interpret=False), case, True), mesh=mesh,
                                       in_specs=tuple(specs), out_specs=tuple(specs[:-2])))
        text = native.trace(*placed).lower(lowering_platforms=("tpu",)).as_text()
        lowered[case["name"]] = sorted(k for k in ("_pre", "_dgrad", "_wgrad", "_dbias") if f"{case['name']}{k}" in text)
    np.savez(out, **results)
    with open(out + ".json", "w") as fh:
        json.dump({"psums": psums, "dtypes": dtypes, "lowered": lowered}, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
