"""jax.grad of a Pallas TPU training entry (its jax.custom_vjp) under jax.jit inside jax.shard_map, in a subprocess with
four CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=4; the flag must be set before jax starts, so not in
the test process): tests/backends/pallas/test_training_tpu_shard.py runs it and compares with float64 autograd.

Run as `python3 tpu_shard.py JOB OUT` from the repository root: JOB a JSON list of cases {path (the rendered module),
name (its entry), inputs (an .npz of f32 arrays x0, x1, ...: the arguments in order, then dOut), dtypes (each one's jnp
dtype name), specs (each one's PartitionSpec over mesh axis "x", a list of "x" or nulls), modes (the check_vma
values)}. The step is tests/backends/shard_grads.py's `shard_step`: with check_vma a replicated argument's gradient
comes back summed over the mesh, without it the step psums it. OUT (.npz) gets each case's gradients, f32, keyed
"case/mode/argument index", and "case/devices" (the devices the first gradient spans)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(job: str, out: str) -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: backends.shard_grads
    from backends.shard_grads import shard_step
    from specgen.compile import load_rendered

    assert len(jax.devices()) == 4, jax.devices()
    mesh = jax.make_mesh((4,), ("x",))
    results = {}
    with open(job) as fh:
        cases = json.load(fh)
    for i, case in enumerate(cases):
        mod = load_rendered(case["path"], f"_tpu_shard_{i}_{case['name']}")
        with np.load(case["inputs"]) as data:
            arrays = [jnp.asarray(data[f"x{j}"], dt) for j, dt in enumerate(case["dtypes"])]
        for check_vma in case["modes"]:
            f, placed = shard_step(getattr(mod, case["name"]), arrays, [P(*s) for s in case["specs"]], mesh, check_vma)
            grads = f(*placed)
            results[f"{i}/devices"] = np.asarray(len(grads[0].sharding.device_set))
            for j, g in enumerate(grads):
                results[f"{i}/{check_vma}/{j}"] = np.asarray(g, np.float32)
    np.savez(out, **results)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
