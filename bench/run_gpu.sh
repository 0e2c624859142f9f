#!/usr/bin/env bash
# The GPU entry point: the marked GPU tests, then the benchmarks (Triton, CuTe, then Pallas Mosaic GPU). Run from the repo
# root on a CUDA machine with torch and triton installed (specgen's own deps are not needed: generated
# modules only import specgen.runtime); the CuTe parts need nvidia-cutlass-dsl 4.8.1 (and apache-tvm-ffi
# for the fast call path): on the H200 image, install them with ../shared/tools/gpu-wheel-bundle (its
# header says how) and export PYTHONPATH as it shows. Logs and results go to ${OUT:-bench/out}.
set -uo pipefail
out=${OUT:-bench/out}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_INTERPRET=0  # tests/conftest.py defaults it to 1 for the CPU suite
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
python3 -m pytest tests/gpu tests/conformance tests/backends -m gpu -q -p no:cacheprovider -n 8 --dist loadgroup 2>&1 | tee "$out/gpu-tests.log"
tests=${PIPESTATUS[0]}
# The timers' own check: cuBLAS against itself, paired and unpaired (bench/RESULTS.md reads ratios through it)
python3 bench/aa_check.py --out "$out" 2>&1 | tee "$out/aa-check.log"
python3 bench/bench_triton.py --out "$out" "$@" 2>&1 | tee "$out/bench.log"
bench=${PIPESTATUS[0]}
python3 bench/bench_cute.py --out "$out" 2>&1 | tee "$out/bench-cute.log"
cute=${PIPESTATUS[0]}
# Pallas Mosaic GPU (needs jax[cuda] 0.11; torch shares the GPU, so jax must not preallocate it)
XLA_PYTHON_CLIENT_PREALLOCATE=false python3 bench/bench_pallas.py --out "$out" 2>&1 | tee "$out/bench-pallas.log"
pallas=${PIPESTATUS[0]}
# CuTe through JAX (XLA's FFI): host cost, kernel time, cold start
XLA_PYTHON_CLIENT_PREALLOCATE=false python3 bench/bench_cute_jax.py --out "$out" 2>&1 | tee "$out/bench-cute-jax.log"
cute_jax=${PIPESTATUS[0]}
exit $(( tests || bench || cute || pallas || cute_jax ))
