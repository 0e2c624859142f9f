"""The grouped Pallas Mosaic GPU kernel on fp8 (pallas:gpu_sm90, the catalogue's `moe_fp8_rowwise`: e4m3 A and
K-major B, rowwise scales, bf16 out) against torch._scaled_grouped_mm and jax.lax.ragged_dot on the issue's seven
rows, with the project's paired CUPTI timer (`specgen.bench.timing.kernel_cycle`: every call once per round in a
rotating order, L2 flushed before each; a JAX call waits for torch's stream first and is waited for).

"ours" is the JAX entry (`_call`, the config for the row's total rows), "ours_again" the same call (A/A), "ours_torch"
the torch entry (`moe_fp8_rowwise_torch`: its direct launch at these aligned shapes), "scaled_grouped_mm"
torch._scaled_grouped_mm on the same tensors (B (G, N, K) passed transposed, scale_a (M,), scale_b (G, N), bf16
out), "ragged_dot" jax.jit of jax.lax.ragged_dot on the fp8 operands in its (G, K, N) layout with an f32 result,
then the same scales and the cast (where XLA takes fp8 there; else its error is recorded). Group sizes come from
the kind's declared distributions (specgen/kinds/grouped/problem.py MODEL_SHAPES, seeded).

    python gpu/bench_grouped_mgpu_fp8.py --out out/gpu [--rounds 20] [--rows decode,mixtral_up]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from specgen.bench.stats import paired  # noqa: E402
from specgen.bench.timing import jax_call, kernel_cycle  # noqa: E402
from specgen.kinds.grouped.problem import Shape, group_sizes  # noqa: E402

ROWS = {"deepseek_up": Shape(32, 128, 4096, 7168), "deepseek_down": Shape(32, 128, 7168, 2048),
        "deepseek_up_skewed": Shape(32, 128, 4096, 7168, 1), "mixtral_up": Shape(8, 1024, 14336, 4096),
        "mixtral_down": Shape(8, 1024, 4096, 14336), "qwen3_up": Shape(128, 32, 3072, 4096),
        "decode": Shape(32, 2, 4096, 7168)}


def to_jax(t: torch.Tensor) -> jax.Array:
    """A CUDA fp8 tensor as a jax array of the same bits (DLPack of its bytes, then a bitcast: a copy, untimed)."""
    raw = jax.dlpack.from_dlpack(t.contiguous().view(torch.uint8))
    return jax.lax.bitcast_convert_type(raw, {torch.float8_e4m3fn: jnp.float8_e4m3fn, torch.float8_e5m2: jnp.float8_e5m2}[t.dtype])


def ragged_peer(a: jax.Array, w_kn: jax.Array, sizes: jax.Array, sa: jax.Array, sb: jax.Array) -> jax.Array:
    """jax.lax.ragged_dot on the fp8 operands (f32 result), then scale_a's rows and each row's group's scale_b."""
    acc = jax.lax.ragged_dot(a, w_kn, sizes, preferred_element_type=jnp.float32)
    group = jnp.searchsorted(jnp.cumsum(sizes), jnp.arange(a.shape[0]), side="right").clip(max=sizes.shape[0] - 1)
    return (acc * sa[:, None] * sb[group]).astype(jnp.bfloat16)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out/gpu")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--rows", default=",".join(ROWS), help="the rows to time, comma-separated")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from generated.pallas.gpu_sm90 import moe_fp8_rowwise as mod

    result: dict[str, object] = {"device": torch.cuda.get_device_name(), "jax": jax.__version__,
                                 "torch": torch.__version__, "rows": {}}
    ragged = jax.jit(ragged_peer)

    for label in args.rows.split(","):
        shape = ROWS[label]
        sizes = group_sizes(shape)
        gen = torch.Generator(device="cuda").manual_seed(0)
        ta = torch.randn(shape.rows, shape.k, generator=gen, device="cuda").to(torch.float8_e4m3fn)
        tw = (torch.randn(shape.g, shape.n, shape.k, generator=gen, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        tsa = torch.rand(shape.rows, generator=gen, device="cuda") * 0.01 + 0.01
        tsb = torch.rand(shape.g, shape.n, generator=gen, device="cuda") * 0.01 + 0.01
        toffs = torch.tensor(sizes, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
        a, w, sa, sb = to_jax(ta), to_jax(tw), jax.dlpack.from_dlpack(tsa), jax.dlpack.from_dlpack(tsb)
        offs, gs = jax.dlpack.from_dlpack(toffs), jnp.asarray(sizes, jnp.int32)
        calls = {"ours": jax_call(mod._call, a, w, offs, sa, sb, None)}
        calls["ours_again"] = calls["ours"]  # A/A
        tb = tw.transpose(-2, -1)  # (G, K, N) logical, column-major: what both torch callees take
        calls["ours_torch"] = lambda x=(ta, tb, toffs, tsa, tsb): mod.moe_fp8_rowwise_torch(*x)
        calls["scaled_grouped_mm"] = lambda x=(ta, tb, tsa, tsb), o=toffs: torch._scaled_grouped_mm(
            *x, offs=o, out_dtype=torch.bfloat16)
        row: dict[str, object] = {"sizes": sizes, "config": mod._config_for(shape.rows, shape.n, shape.k)._asdict()}
        try:  # XLA may not take fp8 ragged_dot: record why, time the rest
            w_kn = jnp.swapaxes(w, 1, 2).copy()
            ragged(a, w_kn, gs, sa, sb).block_until_ready()
            calls["ragged_dot"] = jax_call(ragged, a, w_kn, gs, sa, sb)
        except Exception as e:  # noqa: BLE001 (the peer's own error is the finding)
            row["ragged_dot_error"] = f"{type(e).__name__}: {str(e)[:400]}"
        # the three ours agree with the peer (bf16 rounding apart) on the groups' rows
        rows = int(toffs[-1])
        got, got_t = torch.from_dlpack(mod._call(a, w, offs, sa, sb, None)), calls["ours_torch"]()
        want = calls["scaled_grouped_mm"]()
        torch.cuda.synchronize()
        row["max_abs_diff_vs_peer"] = [float((x[:rows].float() - want[:rows].float()).abs().max()) for x in (got, got_t)]
        row["peer_max_abs"] = float(want[:rows].float().abs().max())
        cycle = kernel_cycle(calls, args.rounds)
        ours = cycle["ours"]["samples"]
        row["ours_us"] = paired(ours, ours).ours_us
        for name in calls:
            if name != "ours":
                row[f"{name}_over_ours"] = paired(ours, cycle[name]["samples"]).model_dump()
        torch_side = cycle["ours_torch"]["samples"]
        row["scaled_grouped_mm_over_ours_torch"] = paired(torch_side, cycle["scaled_grouped_mm"]["samples"]).model_dump()
        row["kernels"] = {name: cycle[name]["kernels"] for name in calls}
        result["rows"][label] = row
        print(label, json.dumps({k: (round(v["ratio"], 3), round(v["peer_us"], 1)) if isinstance(v, dict) and "ratio" in v
                                 else v for k, v in row.items() if k not in ("kernels", "sizes", "config")}), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench-grouped-mgpu-fp8.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
