#!/usr/bin/env bash
# The GPU entry point: the marked GPU tests, then `specgen bench` over the catalogue, then a small
# `specgen tune` (a 24-config space of gemm_bf16 on triton:sm90 at one shape) with --verify (all 24 timed
# side by side: is the pick the best?), and the compile throughput with 1 and 16 workers. Run from the repo
# root on a CUDA machine with torch and triton (the CuTe rows need nvidia-cutlass-dsl 4.8.1, the Pallas rows
# jax 0.11 with CUDA); specgen's own deps (pydantic, jinja2, typer, rich, tomlkit) come from .whl/ where the
# machine has no network. Logs and records go to ${OUT:-out/gpu}.
set -uo pipefail
out=${OUT:-out/gpu}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_INTERPRET=0  # tests/conftest.py defaults it to 1 for the CPU suite
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # torch and jax share the GPU in one process
if [ -d .whl ]; then python3 -m pip install -q --no-index --find-links .whl tomlkit 2>&1 | tail -1; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
python3 -m pytest tests/gpu tests/conformance tests/backends -m gpu -q -p no:cacheprovider -n 8 --dist loadgroup 2>&1 | tee "$out/gpu-tests.log"
tests=${PIPESTATUS[0]}
# every catalogue kernel on every target this GPU runs, at its default shapes (variants' corners + model shapes)
python3 -m specgen bench --rounds "${ROUNDS:-30}" --json "$out/bench.json" "$@" 2>&1 | tee "$out/bench.log"
bench=${PIPESTATUS[0]}
# the tuner on a small space: 2 x 2 x 2 x 3 = 24 configs (all pass check) + the incumbent, then all timed in one cycle
cp specs/gemm_bf16.toml "$out/tune_gemm_bf16.toml"
python3 -m specgen tune "$out/tune_gemm_bf16.toml" --kernel gemm_bf16 --target triton:sm90 --shapes 8192x8192x8192 \
  --knob tile.m=64,128 --knob tile.n=64,128 --knob tile.k=64 --knob triton.num_warps=4,8 --knob pipeline.ab_stages=2,3,4 \
  --cache "$out/tune-cache.jsonl" --workers 8 --verify --write 2>&1 | tee "$out/tune.log"
tune=${PIPESTATUS[0]}
# compile throughput: the same spec's default space (Triton sm90, one shape) with 1 and 16 workers, nothing cached
for w in 1 16; do
  python3 -m specgen tune gemm_bf16 --target triton:sm90 --shapes 8192x8192x8192 --compile-only --workers $w 2>&1 \
    | tail -3 | tee "$out/compile-$w.log"
done
# CuTe through JAX (XLA's FFI): host cost, kernel time, cold start (what `specgen bench` does not time yet)
XLA_PYTHON_CLIENT_PREALLOCATE=false python3 gpu/bench_cute_jax.py --out "$out" 2>&1 | tee "$out/bench-cute-jax.log"
cute_jax=${PIPESTATUS[0]}
# the host path (issue 20): each torch entry against torch.add(out=) and where its microseconds go
python3 gpu/bench_host.py --out "$out" 2>&1 | tee "$out/bench-host.log"
host=${PIPESTATUS[0]}
# the fused epilogue's cost: bias + GELU against its plain twin (same configs), per backend, paired
python3 gpu/bench_epilogue.py --out "$out" 2>&1 | tee "$out/bench-epilogue.log"
epilogue=${PIPESTATUS[0]}
# cold start per backend (issue 20): importing the backend, the generated module, the first call (empty / disk caches)
python3 gpu/bench_start.py --out "$out" 2>&1 | tee "$out/bench-start.log"
start=${PIPESTATUS[0]}
# the C++ export (issue 23): cold start of a C++ program vs the Python launcher, host cost per call
python3 gpu/bench_export.py --out "$out" 2>&1 | tee "$out/bench-export.log"
export_bench=${PIPESTATUS[0]}
# where a decode GEMM's time goes (issue 20): fixed cost and weight rate per backend and peer, bf16 and fp8
fixed=0
for k in gemm_bf16 gemm_fp8_rowwise; do
  python3 gpu/bench_fixed_cost.py --out "$out" --kernel "$k" 2>&1 | tee "$out/bench-fixed-cost-$k.log"
  [ "${PIPESTATUS[0]}" = 0 ] || fixed=1
done
# the grouped GEMM (issue 37) against torch._grouped_mm on the MoE workloads, even / skewed / empty-group sizes
python3 gpu/bench_grouped.py --out "$out" --dists even,skewed,empty 2>&1 | tee "$out/bench-grouped.log"
grouped=${PIPESTATUS[0]}
# the MoE client (issue 37): a Mixtral-shaped block on the grouped kernels against the eager block, per phase
python3 gpu/bench_moe_client.py --out "$out" 2>&1 | tee "$out/bench-moe-client.log"
moe=${PIPESTATUS[0]}
exit $(( tests || bench || tune || cute_jax || host || epilogue || start || export_bench || fixed || grouped || moe ))
