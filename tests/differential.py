"""Check vs the Triton compiler: a seeded grid of borderline GEMM configs, each checked by specgen and
compiled by `triton.compile` for sm_90 and sm_100 on this CPU machine (no GPU), with ptxas' own log.

`run_case` gives both sides for one (spec, arch); `compare` classifies a list of them:
- false accept: check passed (no error) but the kernel cannot run: the compiler failed, or allocated more
  shared memory than a block may use (the launch would fail);
- false reject: check failed but the compiler built a kernel that fits;
- plan error: |plan SMEM - compiler SMEM| / compiler SMEM;
- spills: ptxas' spill stores, against whether check warned (REG001).
tests/test_differential.py runs a few dozen cases in CI; `nox -s diff` (or `python tests/differential.py
N [SEED [START]]`) the full grid. Imports triton: never imported by check/render.

Measured 2026-11-22 (triton 3.9.0, CPU only, ptxas from Triton's wheel), the final rules over 206
compiled cases (seed 7's first 60 specs but one, seed 3's 40, x 2 archs, plus 14 targeted variants;
the CI prefix is seed 7's first 12 specs): 0 false accepts, 0 false rejects, the plan within 10% of
the compiler on 100% of the accepted cases (the compiler adds 0-80 B of mbarriers), every spill of
1 KB or more warned by REG001 (39 cases, up to 47 KB; 4 warnings without spills), all 9 "wgmma
serialized" cases warned. The model was fitted to these cases (the last 80 found one more class), so
read them as agreement, not a held-out score. The classes: pointer kernels allocate no epilogue SMEM;
FMA dots keep num_stages - 1 A/B buffers and, with TMA, one transposition scratch tile; sm_100 TMA
kernels copy MN-major tf32 operands K-major (2 tiles each); on sm_90 a residual with 1 KB rows goes
through conversion scratch (a quarter tile beside a persistent TMA pipeline, a whole tile over a
pointer kernel's). Before the scratch classes the seed-3 grid had 2 false accepts and the plan within
10% on 91.5%; main's model, on seed 7's first 36 cases: 1 false accept (sm_100 tf32), 4 false
rejects (REG001), the plan more than 10% off on 5 of 24 accepted cases.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

SMEM_LIMIT = 232448  # per block, sm_90 and sm_100 (cutlass arch.h)


def grid(n: int, seed: int = 7) -> list[dict]:
    """n seeded specs near the SMEM and register boundaries (big tiles, deep pipelines)."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        dtype = rng.choice(["bf16", "f16", "fp8_e4m3", "tf32", "f32"])
        out = rng.choice(["bf16", "f32"]) if dtype != "f16" else rng.choice(["f16", "f32"])
        kmin = {"fp8_e4m3": 64, "tf32": 16, "f32": 16}.get(dtype, 32)
        tile = {"m": rng.choice([64, 128, 128, 256]), "n": rng.choice([64, 128, 256, 256]),
                "k": rng.choice([kmin, kmin * 2, kmin * 4])}
        if dtype == "f32":  # FMA dots past 128 x 128 spill so much that ptxas runs for many minutes
            tile["m"], tile["n"] = min(tile["m"], 128), min(tile["n"], 128)
        a_major = "k" if dtype == "fp8_e4m3" else rng.choice(["k", "mn"])
        b_major = "k" if dtype == "fp8_e4m3" else rng.choice(["k", "mn"])
        epilogue = rng.choice([[], [{"op": "bias", "dtype": "bf16" if out == "bf16" else "f32"}],
                               [{"op": "bias", "dtype": "f32"}, {"op": "residual", "dtype": out}],
                               [{"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "gelu_tanh"}]])
        tma = rng.random() < 0.7
        spec = {
            "name": f"diff_{i:04d}", "kind": "gemm",
            "a": {"dtype": dtype, "major": a_major}, "b": {"dtype": dtype, "major": b_major},
            "out": {"dtype": out}, "epilogue": epilogue, "tile": tile,
            "pipeline": {"ab_stages": rng.choice(["auto", "auto", 2, 3, 4, 5])},
            "schedule": {"persistent": rng.random() < 0.6},
            "triton": {"num_warps": rng.choice([4, 8, 8]), "tma": tma,
                       "epilogue_subtile": tma and rng.random() < 0.3},
            "targets": ["triton:sm90", "triton:sm100"],
        }
        specs.append(spec)
    return specs


@dataclass
class Case:
    name: str
    arch: str
    errors: list[str]  # rule ids check failed on
    warnings: list[str]
    plan_smem: int
    compiler_smem: int | None  # None: the compiler failed
    spill_stores: int
    serialized: bool  # ptxas: "wgmma serialized due to insufficient registers"
    compile_error: str = ""

    @property
    def accepted(self) -> bool:
        return not self.errors

    @property
    def runs(self) -> bool:
        return self.compiler_smem is not None and self.compiler_smem <= SMEM_LIMIT

    @property
    def plan_error(self) -> float | None:
        return None if not self.compiler_smem else abs(self.plan_smem - self.compiler_smem) / self.compiler_smem


def run_case(spec: dict, arch: str, folder: Path) -> Case:
    """Check the spec on triton:<arch>, render it, compile its kernel for the arch with ptxas' log."""
    import triton
    from triton import knobs

    from specgen.check import check_spec
    from specgen.compile import load_rendered
    from specgen.designs.gemm_triton_compile import compile_module
    from specgen.render.catalogue import render_triton_module
    from specgen.spec.load import load_text
    from specgen.targets import TARGETS

    (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<diff:{spec['name']}>", ".json")
    target = f"triton:{arch}"
    diags = [d for d in check_spec(ls) if d.target == target]
    errors = sorted({d.rule for d in diags if d.severity == "error"})
    warnings = sorted({d.rule for d in diags if d.severity == "warning"})
    path = folder / f"{spec['name']}.py"
    path.write_text(render_triton_module(ls, ls.spec.targets))
    module = load_rendered(path, f"_specgen_diff_{spec['name']}")
    info = TARGETS[target]
    plan_smem = module.METADATA["plan"][info.compute_capability]["smem_bytes"]
    log = io.StringIO()
    knobs.nvidia.dump_ptxas_log = True
    knobs.compilation.always_compile = True  # a cache hit would skip ptxas and its log (the spills)
    try:
        with contextlib.redirect_stdout(log):
            result = compile_module(module, info)[0]  # the default config (the grid's specs have no variants)
    finally:
        knobs.nvidia.dump_ptxas_log = False
        knobs.compilation.always_compile = False
    del triton
    text = log.getvalue()
    spills = sum(int(x) for x in re.findall(r"(\d+) bytes spill stores", text))
    return Case(spec["name"], arch, errors, warnings, plan_smem, result.compiler_smem, spills,
                bool(re.search(r"wgmma[^\n]*serialized", text)), result.error)


SPILL_NOTICE = 1024  # bytes of spill stores worth a warning (tcgen05 epilogues spill a few dozen bytes)


def compare(cases: list[Case]) -> dict[str, object]:
    accepted = [c for c in cases if c.accepted and c.plan_error is not None]
    return {
        "cases": len(cases),
        "compiled": sum(c.compiler_smem is not None for c in cases),
        "false_accepts": [(c.name, c.arch, c.plan_smem, c.compiler_smem, c.compile_error[:80])
                          for c in cases if c.accepted and not c.runs],
        "false_rejects": [(c.name, c.arch, c.errors, c.plan_smem, c.compiler_smem) for c in cases
                          if not c.accepted and c.runs],
        "within_10pct": sum(c.plan_error <= 0.10 for c in accepted) / max(1, len(accepted)),
        "off_by_more_than_10pct": [(c.name, c.arch, c.plan_smem, c.compiler_smem) for c in accepted
                                   if c.plan_error > 0.10],
        "spilled_without_warning": [(c.name, c.arch, c.spill_stores) for c in cases
                                    if c.spill_stores >= SPILL_NOTICE and "REG001" not in c.warnings + c.errors],
        "warned_without_spills": [(c.name, c.arch) for c in cases
                                  if c.compiler_smem is not None and not c.spill_stores and "REG001" in c.warnings],
        "max_spill_stores": max((c.spill_stores for c in cases), default=0),
    }


def problems(summary: dict[str, object]) -> list[str]:
    """What the issue's bar says is wrong: any false accept, false rejects at 2% or more, the plan
    within 10% of the compiler on fewer than 95% of the accepted cases."""
    out = []
    if summary["false_accepts"]:
        out.append(f"false accepts: {summary['false_accepts']}")
    if len(summary["false_rejects"]) >= 0.02 * summary["cases"]:
        out.append(f"false rejects >= 2%: {summary['false_rejects']}")
    if summary["within_10pct"] < 0.95:
        out.append(f"plan within 10% on {summary['within_10pct']:.1%} < 95%: {summary['off_by_more_than_10pct']}")
    return out


def main(n: int, seed: int = 7, start: int = 0) -> int:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="specgen-diff-"))
    cases = []
    for spec in grid(n, seed)[start:]:
        for arch in ("sm90", "sm100"):
            cases.append(run_case(spec, arch, folder))
            print(json.dumps({"case": vars(cases[-1]), "spec": spec}), flush=True)
    summary = compare(cases)
    print(json.dumps({"summary": summary, "problems": problems(summary)}), flush=True)
    return 1 if problems(summary) else 0


if __name__ == "__main__":
    sys.exit(main(*(int(a) for a in sys.argv[1:4])) if len(sys.argv) > 1 else main(500))
