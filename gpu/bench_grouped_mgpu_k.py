"""The grouped Pallas Mosaic GPU kernel with groups along K (the weight gradient, dB[g] = x_g^T @ dy_g) against
jax.lax.ragged_dot_general under jax.jit (XLA; the contracting dim ragged: lhs (K, M), rhs (K, N)) on the issue's
up projections, with the project's paired CUPTI timer (`specgen.bench.timing.kernel_cycle`: every call once per round
in a rotating order, L2 flushed before each; a JAX call waits for torch's stream first and is waited for).

The kernel is rendered here from one spec (no catalogue module): bf16, x (rows, H) and dy (rows, N) as stored (A
M-major, B N-major: the same arrays ragged_dot_general takes), the 128x256x64 tile of the catalogue's moe_bf16 (its
stages from check's SMEM budget); --configs forces others through `_call(..., config=)`, each "TMxTNxTKxSTAGES" or
"TMxTNxTKxSTAGESxOUT_SLOTS" (the epilogue's SMEM slots a warpgroup: out_slots - 1 TMA stores in flight).
An A/A pair (the kernel against itself) shows the timer's spread; torch._grouped_mm's 2-D x 2-D form on the same
tensors is printed beside it (the issue's peer), timed from torch. Group sizes: the kind's distributions (a row's
:DIST, even by default; skewed is Dirichlet(0.3), seeded).

    python gpu/bench_grouped_mgpu_k.py --out out/gpu [--rounds 10] [--rows deepseek_up,qwen3_up:skewed] [--configs ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from specgen.bench.stats import paired  # noqa: E402
from specgen.bench.timing import jax_call, kernel_cycle  # noqa: E402
from specgen.kinds.grouped.problem import DISTRIBUTIONS, Shape, group_sizes  # noqa: E402

# The layer's shapes (G experts x rows each, N, the layer's K): the weight gradient's M is the layer's K, its K
# every group's rows.
ROWS = {"deepseek_up": Shape(32, 128, 4096, 7168), "mixtral_up": Shape(8, 1024, 14336, 4096),
        "qwen3_up": Shape(128, 32, 3072, 4096)}
SPEC = {"name": "wgrad_bench_bf16", "kind": "grouped", "a": {"dtype": "bf16", "major": "mn"},
        "b": {"dtype": "bf16", "major": "mn"}, "out": {"dtype": "bf16"}, "tile": {"m": 128, "n": 256, "k": 64},
        "groups": {"index": "sizes", "ragged": "k"}, "targets": ["pallas:gpu_sm90"]}


def render() -> object:
    from specgen.compile import load_rendered
    from specgen.registry import design_for
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    (loaded,) = load_text(json.dumps({"kernels": [SPEC]}), "<bench>", ".json")
    (target,) = loaded.spec.targets
    files = design_for("grouped", target).render(loaded, [target], {str(target): resolve(loaded.spec, target)})
    path = Path(tempfile.mkdtemp()) / f"{SPEC['name']}.py"
    path.write_text(files[f"pallas/gpu_sm90/{SPEC['name']}.py"])
    return load_rendered(path, f"_bench_{SPEC['name']}")


def forced_config(base, item: str):
    """A --configs item ("TMxTNxTKxSTAGES[xOUT_SLOTS]") as the module's Config row: the design's plan of SPEC at that
    tile and stages (what check resolves and `mgpu_config` renders: the warpgroup split, epilogue subtiles, swizzles
    and SMEM), its output slots forced where given (the design's SMEM at that layout, `mgpu_smem`); None (the
    findings printed) where check refuses the spec."""
    import dataclasses

    from specgen.check import check_spec
    from specgen.kinds.gemm.designs.pallas.design import mgpu_config, mgpu_layout, mgpu_smem
    from specgen.kinds.grouped.designs.pallas_mgpu.design import CONFIG_FIELDS
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    tm, tn, tk, st, slots = re.fullmatch(r"(\d+)x(\d+)x(\d+)x(\d+)(?:x(\d+))?", item).groups()
    spec = {**SPEC, "tile": {"m": int(tm), "n": int(tn), "k": int(tk)}, "pipeline": {"ab_stages": int(st)}}
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<bench {item}>", ".json")
    if errors := list(dict.fromkeys(f"{d.rule}: {d.message}" for d in check_spec(loaded) if d.severity == "error")):
        print(f"{item}: refused by check (not timed):", *errors, sep="\n    ", flush=True)
        return None
    r = resolve(loaded.spec, loaded.spec.targets[0])
    cfg = mgpu_config(r)
    if slots:  # (SPEC has no residual: no residual barriers to scale with the slots)
        lay = dataclasses.replace(mgpu_layout(r.spec), out_slots=int(slots))
        budget = mgpu_smem(r.spec, r.budget.capacity, r.ab_stages, lay)
        cfg = dataclasses.replace(cfg, out_slots=int(slots), smem_bytes=budget.total, smem_breakdown=budget.breakdown())
    if cfg.smem_bytes > r.budget.capacity:  # (check ruled the design's slots; these are forced)
        print(f"{item}: {cfg.smem_bytes} B of SMEM, past the {r.budget.capacity} B a block has: it will not lower", flush=True)
    return base._replace(**{field: getattr(cfg, planned) for field, planned in CONFIG_FIELDS})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out/gpu")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--configs", default="", help="forced configs: TMxTNxTKxSTAGES[xOUT_SLOTS], ...")
    parser.add_argument("--rows", default="deepseek_up,mixtral_up",
                        help=f"the rows to time, comma-separated, each one of {sorted(ROWS)} with an optional :DIST "
                             f"({', '.join(DISTRIBUTIONS)}; even by default)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    mod = render()
    base = mod.CONFIG
    configs = {}
    for item in filter(None, args.configs.split(",")):
        if (cfg := forced_config(base, item)) is not None:  # (None: check refuses it, its findings printed)
            configs[item] = cfg
    result: dict[str, object] = {"device": torch.cuda.get_device_name(), "jax": jax.__version__,
                                 "torch": torch.__version__, "config": base._asdict(), "rows": {}}
    numbers = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(((0,), (0,)), ((), ())),
                                                lhs_ragged_dimensions=[0], rhs_group_dimensions=[])
    ragged = jax.jit(lambda x, dy, s: jax.lax.ragged_dot_general(x, dy, s, numbers))

    for label in args.rows.split(","):
        name, _, dist = label.partition(":")
        shape = ROWS[name]._replace(dist=DISTRIBUTIONS.index(dist or "even"))
        sizes = group_sizes(shape)
        key = jax.random.key(0)
        x = jax.random.normal(key, (shape.rows, shape.k), jnp.bfloat16)  # the layer's input: (K rows, M)
        dy = jax.random.normal(jax.random.fold_in(key, 1), (shape.rows, shape.n), jnp.bfloat16)  # (K rows, N)
        gs = jnp.asarray(sizes, jnp.int32)
        calls = {"ours": jax_call(mod._call, x, dy, gs), "ragged_dot_general": jax_call(ragged, x, dy, gs)}
        for name, cfg in configs.items():
            calls[name] = jax_call(lambda x, dy, s, cfg=cfg: mod._call(x, dy, s, None, config=cfg), x, dy, gs)
        calls["ours_again"] = calls["ours"]  # A/A
        tx, tdy = torch.from_dlpack(x), torch.from_dlpack(dy)
        offs = torch.cumsum(torch.tensor(sizes, dtype=torch.int32, device="cuda"), 0, dtype=torch.int32)
        calls["torch_grouped_mm"] = lambda tx=tx, tdy=tdy, offs=offs: torch._grouped_mm(tx.t(), tdy, offs=offs)
        got = jnp.asarray(mod._call(x, dy, gs), jnp.float32)
        want = ragged(x, dy, gs).astype(jnp.float32)
        err = float(jnp.max(jnp.abs(got - want)) / jnp.max(jnp.abs(want)))
        cycle = kernel_cycle(calls, args.rounds)
        ours = cycle["ours"]["samples"]
        work = 2 * shape.rows * shape.n * shape.k
        row = {"sizes": sizes, "max_err_vs_ragged_dot_general": err, "ours_us": paired(ours, ours).ours_us,
               "ours_tflops": work / paired(ours, ours).ours_us / 1e6,
               "out_gb_per_s": shape.g * shape.k * shape.n * 2 / paired(ours, ours).ours_us / 1e3}
        for name in calls:
            if name != "ours":
                row[f"{name}_over_ours"] = paired(ours, cycle[name]["samples"]).model_dump()
        row["kernels"] = {name: cycle[name]["kernels"] for name in calls}
        result["rows"][label] = row
        print(label, json.dumps({k: (v["ratio"], v["ratio_lo"], v["ratio_hi"], v["peer_us"]) if isinstance(v, dict) and "ratio" in v
                                 else v for k, v in row.items() if k not in ("kernels", "sizes")}), flush=True)
        print("  kernels (median us):", json.dumps({n: {k: round(t, 1) for k, t in row["kernels"][n].items()}
                                                    for n in calls}), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench-grouped-mgpu-k.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
