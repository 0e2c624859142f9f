"""Per-call cost of the size-selected variant choice, on the CPU (no GPU needed).

Renders one spec twice, with and without `variants` (three of them, the call falling through every
compare to the default: the worst case), replaces each module's launcher with a no-op, and times the
public call (guards, selection, descriptors, key) on CPU tensors under TRITON_INTERPRET=1, alternating
the two modules round by round in one process. The difference of the per-call minima is what selection
costs. Usage: python bench/bench_variant_select.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch  # noqa: E402
from kernels import catalogue, interpreter_variant, load_module  # noqa: E402

VARIANTS = [
    {"when": {"m_max": 1}, "tile": {"m": 16, "n": 64, "k": 128}},
    {"when": {"m_max": 16}, "tile": {"m": 16, "n": 128, "k": 128}},
    {"when": {"m_max": 48, "n_max": 4096}, "tile": {"m": 64, "n": 128, "k": 64}},
]


class NoLaunch:
    """The launch itself is not what we time."""

    def __call__(self, *args: object, **kw: object) -> None:
        return None

    def num_sms(self, device: int) -> int:
        return 132


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def selection_alone(path: Path, module: object) -> dict[str, float]:
    """The rendered selection block itself (cut from the module's `_run`, run in a function of M, N, K
    against an empty one), per call, min over repeats: less noisy than the whole call's difference."""
    run = path.read_text().split("def _run(", 1)[1]
    lines = run.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("if M <= "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("        ") and
               not lines[i].startswith(("    elif", "    else")))
    body = "\n".join(lines[start:end])
    scope = dict(vars(module))
    exec(f"def sel(M, N, K):\n{body}\n    return variant\n\ndef empty(M, N, K):\n    return None\n", scope)
    out = {}
    for label, (m, n) in {"first_compare_holds": (1, 64), "all_fail_default": (4096, 8192)}.items():
        sel = empty = float("inf")  # minima over many short batches: the least disturbed by other load
        for _ in range(300):
            sel = min(sel, per_call_us(lambda f=scope["sel"], m=m, n=n: f(m, n, 64), 3000))
            empty = min(empty, per_call_us(lambda f=scope["empty"], m=m, n=n: f(m, n, 64), 3000))
        out[label] = round(sel - empty, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in ("gemm_bf16", "gemm_small_bf16"):  # TMA persistent; pointer, one program per tile
            plain = interpreter_variant(catalogue()[kernel])
            for key in ("variants", "per_target"):  # the catalogue's own variants: not part of "plain"
                plain.pop(key, None)
            plain["name"] = f"{kernel}_plain"
            varied = {**plain, "name": f"{kernel}_variants", "variants": VARIANTS}
            mods = {name: load_module(spec, Path(tmp)) for name, spec in (("plain", plain), ("variants", varied))}
            for m in mods.values():
                m._launcher = NoLaunch()
            a = torch.randn(64, 64, dtype=torch.float16)
            b = torch.randn(64, 64, dtype=torch.float16).t()
            out = torch.empty(64, 64, dtype=torch.float16)
            fns = {name: (lambda f=getattr(m, spec["name"]): f(a, b, out=out))
                   for (name, m), spec in zip(mods.items(), (plain, varied), strict=True)}
            best = {name: float("inf") for name in fns}
            for _ in range(args.rounds):
                for name, fn in fns.items():
                    best[name] = min(best[name], per_call_us(fn, args.calls))
            results[kernel] = {"plain_us": round(best["plain"], 3), "variants_us": round(best["variants"], 3),
                               "difference_us": round(best["variants"] - best["plain"], 3),
                               "selection_alone_us": selection_alone(Path(tmp) / f"{varied['name']}.py", mods["variants"])}
    print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__, "M_N_K": [64, 64, 64],
                      "compares_failed": "all three (default chosen)", "results": results}, indent=2))


if __name__ == "__main__":
    main()
