#!/usr/bin/env bash
# Nsight Compute over issue 20's short cells (gpu/ncu_probe.py: each backend's kernel beside the peer's,
# caches flushed per replay, clocks left alone): the details page of each as text and the headline
# counters as CSV under $OUT/ncu, two files per case (the reports stay in /tmp/ncu, on the machine).
# Run from the repo root on a CUDA machine whose runtime lets ncu read counters (the Firecracker kinds),
# the CuTe DSL and specgen's deps on PYTHONPATH, as gpu/run.sh says.
#   gpu/ncu.sh [CASE...]   cases: decode (gemm_bf16 1x and 16x8192x8192), fp8 (16x8192x8192), large (4096^3),
#                          flushes (gemm_bf16 and fp8 at 16x8192x8192, one pass of time and DRAM bytes after each
#                          of the paired timer's two L2 flushes, ncu's own cache control off)
set -uo pipefail
out=${OUT:-out}/ncu
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 XLA_PYTHON_CLIENT_PREALLOCATE=false
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)}
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sector_op_read_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__registers_per_thread,launch__shared_mem_per_block_dynamic
reports=/tmp/ncu
mkdir -p "$reports"
probe() {  # probe NAME KERNEL SHAPE TARGETS
  local name=$1
  "$NCU" --clock-control none --profile-from-start off --set full --import-source no -f -o "$reports/$name" \
    python3 gpu/ncu_probe.py --kernel "$2" --shape "$3" --targets "$4" 2>&1 | tail -n 20 | tee "$out/$name.txt"
  "$NCU" -i "$reports/$name.ncu-rep" --page details --print-units base >> "$out/$name.txt" 2>&1
  "$NCU" -i "$reports/$name.ncu-rep" --page raw --csv --metrics "$METRICS" > "$out/$name.csv" 2>&1
}
flushes() {  # flushes NAME KERNEL SHAPE TARGETS: the timer's write and read flushes, as the kernels meet them
  local name=$1 how
  for how in write read; do
    "$NCU" --clock-control none --cache-control none --profile-from-start off --csv --print-units base \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      python3 gpu/ncu_probe.py --kernel "$2" --shape "$3" --targets "$4" --flush "$how" 2>&1 \
      | grep -v '^==PROF==' > "$out/$name-$how.csv"
  done
}
echo "ncu: $NCU ($("$NCU" --version | tail -1))"
for case in "${@:-decode fp8 large}"; do
  for c in $case; do
    case $c in
      decode)
        probe decode-m1 gemm_bf16 1x8192x8192 triton:sm90,cute:sm90,pallas:gpu_sm90
        probe decode-m16 gemm_bf16 16x8192x8192 triton:sm90,cute:sm90,pallas:gpu_sm90 ;;
      fp8) probe fp8-m16 gemm_fp8_rowwise 16x8192x8192 triton:sm90,cute:sm90,pallas:gpu_sm90 ;;
      large) probe large-4096 gemm_bf16 4096x4096x4096 triton:sm90,cute:sm90,pallas:gpu_sm90 ;;
      flushes)
        flushes flush-bf16-m16 gemm_bf16 16x8192x8192 triton:sm90,cute:sm90
        flushes flush-fp8-m16 gemm_fp8_rowwise 16x8192x8192 triton:sm90,cute:sm90 ;;
      *) echo "unknown case $c (decode, fp8, large, flushes)"; exit 2 ;;
    esac
  done
done
