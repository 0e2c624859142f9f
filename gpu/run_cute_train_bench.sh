#!/usr/bin/env bash
# Issue 38's two CuTe sm90 training measurements in one GPU call (session 32; docs/training/measurements.md says what each is):
#   1. the backward's fused epilogue against the plain GEMM it rides on (gpu/bench_backward_epilogue.py --design cute:
#      gelu and gated recompute kernels, 4096x14336x4096 and 8192^3, paired with an A/A of the plain GEMM);
#   2. the gated layer's forward_pre and recompute configs beside cuBLAS, then the gated step with the fastest ones
#      (bench/cute_train_tiles.py --layer gated --step --compile, 4096x14336x4096).
#
#   gpu/run_cute_train_bench.sh fill   # on the CPU box: compile every kernel both run into .specgen/cute-cache (~1.3 MB)
#   gpu/run_cute_train_bench.sh        # on the GPU, from the repo root (carry .specgen/cute-cache); logs, JSON under $OUT
#
# The CuTe disk cache (SPECGEN_CUTE_CACHE, default .specgen/cute-cache) is keyed by the rendered module's bytes, the
# arch, the DSL version and TVM-FFI: a miss (no cache carried, or a config that spills, which the fill leaves out) is
# compiled at its first call on the GPU (about a second or two each on the CPU box). ROUNDS_EPI, ROUNDS_TILES override.
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_INTERPRET=0  # tests/conftest.py defaults it to 1 for the CPU suite
export SPECGEN_CUTE_CACHE=${SPECGEN_CUTE_CACHE:-$PWD/.specgen/cute-cache}
if [ "${1:-}" = fill ]; then
  python3 gpu/bench_backward_epilogue.py --design cute --compile-only && \
    python3 bench/cute_train_tiles.py --layer gated --compile-only
  rc=$?
  echo "cache: $(find "$SPECGEN_CUTE_CACHE" -name '*.o' | wc -l) kernels, $(du -sh "$SPECGEN_CUTE_CACHE" | cut -f1) in $SPECGEN_CUTE_CACHE"
  exit $rc
fi
out=${OUT:-out/gpu}
mkdir -p "$out"
cached() { find "$SPECGEN_CUTE_CACHE" -name '*.o' 2>/dev/null | wc -l; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$out/gpu.txt"
python3 -c "import importlib.metadata as md, importlib.util as u
print(*(f'{p} {md.version(p)}' for p in ('torch', 'triton', 'nvidia-cutlass-dsl', 'apache-tvm-ffi') if u.find_spec(p.replace('nvidia-cutlass-dsl', 'cutlass').replace('apache-tvm-ffi', 'tvm_ffi'))), sep=', ')" | tee -a "$out/gpu.txt"
echo "CuTe cache before: $(cached) kernels" | tee -a "$out/gpu.txt"
start=$SECONDS
python3 gpu/bench_backward_epilogue.py --design cute --rounds "${ROUNDS_EPI:-30}" \
  --json "$out/backward-epilogue-cute.json" 2>&1 | tee "$out/backward-epilogue-cute.log"
epi=${PIPESTATUS[0]}
echo "backward epilogue: $((SECONDS - start)) s, cache now $(cached) kernels" | tee -a "$out/gpu.txt"
start=$SECONDS
python3 bench/cute_train_tiles.py --layer gated --step --compile --rounds "${ROUNDS_TILES:-20}" \
  --json "$out/cute-train-tiles-gated.json" 2>&1 | tee "$out/cute-train-tiles-gated.log"
tiles=${PIPESTATUS[0]}
echo "gated tiles + step: $((SECONDS - start)) s, cache now $(cached) kernels" | tee -a "$out/gpu.txt"
exit $(( epi || tiles ))
