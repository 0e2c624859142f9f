"""Does the CuTe sm90 recompute GEMM write every element of G? (issue 38: tests/gpu/test_training_cute_batch_gpu.py's
geglu_il-recompute case gives dA with other bits on a second backward in some runs). G is allocated empty and written
element-wise by the recompute kernel: this fills it with NaN before the kernel (a spy on the module's `_gemm`) and
reports the unwritten elements' count and where they are, for the batched and the unbatched interleaved GeGLU form
and the halves SwiGLU form, at the test's shapes, twice each (and whether G's bits repeat).

    python3 gpu/probe_recompute_coverage.py [FORM[:b|u] ...] [--shape BxMxNxK] [--repeat N]

FORM: geglu_il or swiglu, b batched, u unbatched (default: all four, the test's three shapes, two calls each).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

GATED = {"geglu_il": [{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, {"op": "bias", "dtype": "bf16"}],
         "swiglu": [{"op": "gated", "fn": "silu", "layout": "halves"}]}


def spec(chain: str, batch: bool) -> dict:
    return {"name": f"probe_{chain}_{'b' if batch else 'u'}", "kind": "gemm", "batch": batch,
            "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"},
            "epilogue": GATED[chain], "training": {"save": "recompute"}, "tile": {"m": 128, "n": 128, "k": 64},
            "cute": {"mma_warpgroups": 2}, "schedule": {"persistent": True}, "targets": ["cute:sm90"]}


def main() -> None:
    import argparse
    import tempfile

    ap = argparse.ArgumentParser()
    ap.add_argument("forms", nargs="*", default=["geglu_il:b", "geglu_il:u", "swiglu:b", "swiglu:u"])
    ap.add_argument("--shape", default="", help="one BxMxNxK instead of the test's three")
    ap.add_argument("--repeat", type=int, default=2, help="backward calls compared with the first")
    opts = ap.parse_args()
    shapes = [tuple(map(int, opts.shape.split("x")))] if opts.shape else [(5, 256, 512, 384), (3, 200, 100, 72), (1, 1, 264, 72)]

    from kernels import load_target_module

    tmp = Path(tempfile.mkdtemp())
    for form in opts.forms:
        chain, batched = form.split(":")[0], form.endswith(":b")
        s = spec(chain, batched)
        (tmp / s["name"]).mkdir()
        mod = load_target_module(s, "cute:sm90", tmp / s["name"], "_probe_")[0]
        seen: list[torch.Tensor] = []
        orig = mod._gemm

        def spy(role, x, y, dst, *rest, orig=orig, seen=seen, **kw):
            if role == "recompute":
                dst.fill_(float("nan"))
                out = orig(role, x, y, dst, *rest, **kw)
                seen.append(dst.clone())
                return out
            return orig(role, x, y, dst, *rest, **kw)

        mod._gemm = spy
        fn = getattr(mod, s["name"])
        for shape in shapes:
            batch, M, N, K = shape
            lead = (batch,) if batched else ()
            rows = M if batched else batch * M
            gen = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(*lead, rows, K, generator=gen, device="cuda").bfloat16().requires_grad_()
            b = (torch.randn(*lead, 2 * N, K, generator=gen, device="cuda") / K**0.5).bfloat16().mT.detach().requires_grad_()
            args = [a, b]
            if chain == "geglu_il":
                args.append(torch.randn(N, generator=gen, device="cuda").bfloat16().requires_grad_())
            grad = torch.randn(*lead, rows, N, generator=gen, device="cuda").bfloat16()
            seen.clear()
            grads = [torch.autograd.grad(fn(*args), args, grad) for _ in range(opts.repeat)]
            torch.cuda.synchronize()
            g0, g1 = seen[0], next((g for g in seen[1:] if not torch.equal(g.nan_to_num(), seen[0].nan_to_num())), seen[1])
            print(f"  {sum(not torch.equal(g.nan_to_num(), g0.nan_to_num()) for g in seen[1:])} of {len(seen) - 1} "
                  "later calls' G differ from the first's", flush=True)
            nan = g0.isnan()
            where = nan.nonzero()
            print(f"{chain} {'batched' if batched else 'unbatched'} {shape}: G {tuple(g0.shape)}, unwritten "
                  f"{int(nan.sum())} / {nan.numel()}"
                  + (f" (first {where[:4].tolist()}, rows {where[:, -2].unique()[:8].tolist()}, cols "
                     f"{where[:, -1].unique()[:8].tolist()})" if len(where) else "")
                  + f"; G bits repeat {torch.equal(g0.nan_to_num(), g1.nan_to_num())}; dA bits repeat "
                  f"{torch.equal(grads[0][0], grads[1][0])}; dB {torch.equal(grads[0][1], grads[1][1])}")
            differ = (g0.nan_to_num() != g1.nan_to_num()).nonzero()
            if len(differ):  # where the two runs' G differ: rows and columns within a 128 x 128 tile, batches, sizes
                d = (g0.float() - g1.float()).abs()
                print(f"    G differs at {len(differ)} elements, max |diff| {d.max().item():.3g} (|G| max "
                      f"{g0.float().abs().max().item():.3g}); rows % 128 {(differ[:, -2] % 128).unique()[:12].tolist()}, "
                      f"cols % 128 {(differ[:, -1] % 128).unique()[:12].tolist()}, tiles (row // 128, col // 128) "
                      f"{sorted({(int(r) // 128, int(c) // 128) for r, c in differ[:, -2:].tolist()})[:12]}"
                      + (f", batches {differ[:, 0].unique().tolist()}" if g0.dim() == 3 else ""))


if __name__ == "__main__":
    main()
