"""jax.grad of a Pallas TPU training entry (its jax.custom_vjp) under jax.jit inside jax.shard_map, in a subprocess with
four CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=4; the flag must be set before jax starts, so not in
the test process): tests/backends/pallas/test_training_tpu_shard.py runs it and compares with float64 autograd.

Run as `python3 tpu_shard.py JOB OUT`: JOB a JSON list of cases {path (the rendered module), name (its entry), inputs
(an .npz of f32 arrays x0, x1, ...: the arguments in order, then dOut), dtypes (each one's jnp dtype name), specs (each argument's and dOut's PartitionSpec, a list of mesh axis names
or nulls), modes (the check_vma values)}. The step, as jax's own autodiff of a sharded loss gives it:
- check_vma=True: the loss psum'd over the mesh; a replicated argument's gradient comes back summed over the mesh (the
  entry's cast to varying transposes to a psum), a sharded one's per shard;
- check_vma=False: each shard's loss; the step psums a replicated argument's gradient itself.
OUT (.npz) gets each case's gradients, f32, keyed "case/mode/argument index", and "case/devices" (the devices the first
gradient spans)."""

from __future__ import annotations

import json
import sys

import numpy as np


def sharded_grads(fn, arrays: list, specs: list, check_vma: bool):
    """The jitted shard_map step over every device and the arrays placed by their specs."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    parts = [P(*s) for s in specs]
    argnums = tuple(range(len(arrays) - 1))

    def local(*xs):
        return jnp.sum(fn(*xs[:-1]).astype(jnp.float32) * xs[-1].astype(jnp.float32))

    def step(*xs):
        if check_vma:  # the mesh's loss: a replicated argument's gradient comes back summed
            return jax.grad(lambda *ys: jax.lax.psum(local(*ys), "x"), argnums=argnums)(*xs)
        grads = jax.grad(local, argnums=argnums)(*xs)  # each shard's: the step sums a replicated argument's
        return tuple(jax.lax.psum(g, "x") if not any(parts[i]) else g for i, g in enumerate(grads))

    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=tuple(parts), out_specs=tuple(parts[:-1]), check_vma=check_vma))
    return f(*(jax.device_put(x, NamedSharding(mesh, s)) for x, s in zip(arrays, parts, strict=True)))


def main(job: str, out: str) -> None:
    import jax
    import jax.numpy as jnp

    from specgen.compile import load_rendered

    assert len(jax.devices()) == 4, jax.devices()
    results = {}
    with open(job) as fh:
        cases = json.load(fh)
    for i, case in enumerate(cases):
        mod = load_rendered(case["path"], f"_tpu_shard_{i}_{case['name']}")
        with np.load(case["inputs"]) as data:
            arrays = [jnp.asarray(data[f"x{j}"], dt) for j, dt in enumerate(case["dtypes"])]
        for check_vma in case["modes"]:
            grads = sharded_grads(getattr(mod, case["name"]), arrays, case["specs"], check_vma)
            results[f"{i}/devices"] = np.asarray(len(grads[0].sharding.device_set))
            for j, g in enumerate(grads):
                results[f"{i}/{check_vma}/{j}"] = np.asarray(g, np.float32)
    np.savez(out, **results)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
