"""CuTe sm90 on this CPU machine: every catalogue kernel with a cute:sm90 target compiles for sm_90a
through `specgen compile --target cute:sm90 --sass` (the real CLI, in a subprocess), to
SASS with TMA loads and stores, wgmma (HGMMA, QGMMA for fp8) and no local-memory spills, launching
with exactly the SMEM the plan allocates (a training kernel's backward GEMMs too, and its columns kernel); the compile fills the disk cache, and a second process
loads the kernel from it without compiling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgen.kinds.gemm.designs.cute_sm90.compile import launch_smem
from specgen.spec.load import load_paths

ROOT = Path(__file__).resolve().parents[3]
# one worker: the module-scoped compile of the catalogue (every config, tens of seconds) is built once, not once on
# each xdist worker its tests land on
pytestmark = pytest.mark.xdist_group("cute_sm90_catalogue")
CATALOGUE = {(ls.name, str(t)) for ls in load_paths([ROOT / "specs"]) for t in ls.spec.targets if str(t) == "cute:sm90"}
FP8 = {ls.name for ls in load_paths([ROOT / "specs"]) if ls.spec.a.dtype.is_fp8}
# every GEMM stores by TMA: the dense kernels, ragged K (moe_wgrad_bf16: out (G, M, N) written whole) and the ragged-M
# grouped kernels (each epilogue subtile inside its group's rows; predicated vector stores where a group's end cuts one)


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECGEN_CUTE_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "specgen", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path]:
    cache = tmp_path_factory.mktemp("cute-cache")
    proc = run_cli("compile", "--target", "cute:sm90", "--sass", "--json", cache=cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")], cache


def test_every_catalogue_cute_sm90_kernel_compiles_with_the_plans_smem(compiled):
    rows, _ = compiled
    # one row per config: the default (`<kernel>`), then each size-selected variant (`<kernel>[variant i]`)
    assert {(r["kernel"], r["target"]) for r in rows if "[" not in r["kernel"]} == CATALOGUE
    assert len(CATALOGUE) >= 7
    assert {r["kernel"] for r in rows} >= {"gemm_bf16[variant 0]", "gemm_fp8_rowwise[variant 0]"}
    for r in rows:
        assert not r["error"], r
        assert r["cpu_seconds"] > 0, r  # reported (a budget belongs in a benchmark, not a test)
        assert r["compiler_smem"] == r["plan_smem"], r  # the design's struct, to the byte
        assert r["compiler_smem"] <= 232448, r


def test_sass_has_tma_and_wgmma_and_no_spills(compiled):
    rows, _ = compiled
    # a training kernel's backward GEMMs compile beside its forward (`<kernel>[dgrad]`), as TMA + wgmma kernels too
    assert {r["kernel"] for r in rows} >= {f"linear_gelu_train_cute_bf16[{role}]" for role in ("forward_pre", "dgrad", "wgrad")}
    by_kernel = {r["kernel"]: r["sass"] for r in rows}
    # forward_pre stores pre's subtiles by TMA beside out's: twice the forward's TMA stores
    assert by_kernel["linear_gelu_train_cute_bf16[forward_pre]"]["UTMASTG"] == 2 * by_kernel["linear_gelu_train_cute_bf16"]["UTMASTG"]
    for r in rows:
        sass = r["sass"]
        if "[grad_cols" in r["kernel"]:  # the backward's columns pass: a SIMT kernel (no TMA, no MMA), no spills either
            assert sass["LDL"] == 0 and sass["STL"] == 0 and not r["error"], r
            continue
        assert sass["UTMALDG"] > 0 and sass["UTMASTG"] > 0, r
        mma = "QGMMA" if r["kernel"].split("[")[0] in FP8 else "HGMMA"
        assert sass[mma] > 0, r
        assert sass["LDL"] == 0 and sass["STL"] == 0, r


def test_a_second_process_loads_the_compiled_kernel_from_the_disk_cache(compiled):
    rows, cache = compiled
    assert len(list(cache.glob("*.o"))) == len(rows)  # every config of every kernel
    script = (
        "import time; from pathlib import Path; from specgen.compile import load_rendered; "
        "m = load_rendered(Path('generated/cute/gemm_bf16.py')); L = type(m._launcher); "
        "L.compile = lambda *a, **k: (_ for _ in ()).throw(AssertionError('recompiled')); "
        "t = time.perf_counter(); fns = [m._launcher.load(v) for v in m._launcher.configs]; "
        "print(all(f is not None for f in fns) and len(fns) == len(m.VARIANT_CONFIGS) + 1 > 2, time.perf_counter() - t)"
    )
    env = {**os.environ, "SPECGEN_CUTE_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ok, _seconds = proc.stdout.split()[-2:]
    assert ok == "True", proc.stdout  # (loaded, not compiled: the patched compile raises)


def test_launch_smem_reads_the_launch_configs_shared_memory_field():
    ir = """
  llvm.func @host() {
    %17 = llvm.mlir.constant(215040 : i64) : i64
    %255 = llvm.getelementptr %249[0, 2] : (!llvm.ptr) -> !llvm.ptr, !llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>
    llvm.store %17, %255 : i64, !llvm.ptr
  }
"""
    assert launch_smem(ir) == 215040
    # an over-budget launch prints its size first: `vararg(!llvm.func<...>)` is no function start
    printf = "    %211 = llvm.call @printf(%210, %17) vararg(!llvm.func<i32 (ptr, ...)>) : (!llvm.ptr, i64) -> i32\n"
    assert launch_smem(ir.replace("    %255 =", printf + "    %255 =")) == 215040
    assert launch_smem("llvm.func @host() {}") is None
