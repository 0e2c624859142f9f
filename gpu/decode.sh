#!/usr/bin/env bash
# Issue 20's decode run, in two calls on one machine (each under the device's 10-minute call limit):
#   gpu/decode.sh tune   the decode slots tuned on this GPU and written into the specs (CuTe sm90 with its
#                        swap_ab candidates, Mosaic GPU's size-selected variants); the written specs go to
#                        $OUT and to /tmp/tuned (a call's checkout is re-sent, /tmp stays)
#   gpu/decode.sh tune2  the session's second pass (new slots, more knobs), written the same way
#   gpu/decode.sh tune3  the third pass (session 10): the prefill slots on their own shapes (CuTe's default was
#                        chosen over decode shapes too, before decode had slots; Triton gains an N <= 4096 slot),
#                        CuTe fp8's M <= 1024 slot, Mosaic GPU's fp8 decode slots and bf16's M <= 128, K <= 4096 slot
#   gpu/decode.sh tune5  session 11's pass: CuTe's split-K in the cluster on gemm_bf16's decode slots
#   gpu/decode.sh tune6  then deeper pipelines and 2-CTA clusters on the swapped decode slots (as cuBLAS's)
#   gpu/decode.sh tune7  and the fused bias + GELU kernel's prefill configs (CuTe, Triton)
#   gpu/decode.sh tune8  session 12: the CuTe decode slots' K step (tile.k 64 / 128 / 256)
#   gpu/decode.sh tune9  session 12, on an H200: the decode slots that read below 0.95 there
#   gpu/decode.sh tune10 session 12: CuTe's new M <= 128, K <= 4096 slot (whole waves at 128x14336x4096)
#   gpu/decode.sh tune11 session 12: the large shapes' unswept knobs (Triton stages and group_m; its flatten and
#                        epilogue subtile are kernel-wide, refused on one slot: CFG002), CuTe's tile order
#   gpu/decode.sh tune12 session 12: CuTe's M <= 128, K <= 4096 slot with 112-wide tiles (16-column subtiles)
#                        (tune10 and tune12 ran with that slot added to specs/gemm_bf16.toml by hand, a copy of
#                        M <= 128's entry; tune10 kept the incumbent, tune12's H200 pick (128x112) is not shipped:
#                        bench/RESULTS.md. Rerun as they stand, they tune the M <= 128 slot)
#   gpu/decode.sh tune13 session 13: Mosaic GPU's decode slots swapped (pallas.swap_ab), bf16 and fp8
#   gpu/decode.sh tune14 session 13, on an H100: those swapped M <= 16 slots against their neighbours
#   gpu/decode.sh tune15 session 13: a CuTe fp8 M <= 512, N <= 2048 slot (added by hand; 512x2048x2048)
#   gpu/decode.sh check  those specs rendered, the whole GPU test suite on that state, then the issue's
#                        table: bf16 decode and large shapes, fp8 small and large, on every backend, paired
#                        with the peer; gemm_bf16's variants vs its default config (CuTe, Mosaic GPU)
#   gpu/decode.sh tests | table   check's two halves, for calls that must each stay under the limit
#                        (FLUSH=read: the table's benches with the L2 left clean, specgen bench --flush read)
# Run from the repo root on a CUDA machine (CuTe DSL and specgen's deps on PYTHONPATH, as gpu/run.sh says).
set -uo pipefail
out=${OUT:-out/decode}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 XLA_PYTHON_CLIENT_PREALLOCATE=false
DECODE=1x8192x8192,4x8192x8192,16x8192x8192,32x8192x8192,64x4096x14336,128x8192x8192,128x14336x4096
LARGE=8192x8192x8192,4096x4096x4096,2048x2048x2048,8192x1024x8192,4096x14336x4096
FP8=16x8192x8192,128x8192x8192,512x2048x2048,8192x8192x8192,4096x4096x4096
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
tune() {  # tune ARGS...: one `specgen tune --write`, its log named after the kernel and target
  local log="$out/tune-$3-${5//:/_}.log"
  # the cache lives on the machine across calls (a call's $OUT starts empty) and goes out with each call
  mkdir -p "${TUNED:-/tmp/tuned}"
  python3 -m specgen tune "$@" --workers "$(nproc)" --cache "${TUNED:-/tmp/tuned}/tune-cache.jsonl" --rounds 30 --write 2>&1 | tee "$log"
  cp "${TUNED:-/tmp/tuned}/tune-cache.jsonl" "$out/"
  return "${PIPESTATUS[0]}"
}
save() {  # the written specs: to $OUT, and to ${TUNED:-/tmp/tuned} for the next call on this machine
  mkdir -p "${TUNED:-/tmp/tuned}" && cp specs/gemm_bf16.toml specs/catalogue.toml "$out/" && cp specs/gemm_bf16.toml specs/catalogue.toml "${TUNED:-/tmp/tuned}/"
}
if [ -d "${TUNED:-/tmp/tuned}" ] && [ "${1:-}" != tune ]; then  # a later pass starts from the earlier passes' specs
  cp "${TUNED:-/tmp/tuned}"/*.toml specs/ 2>/dev/null || true
fi
case "${1:-}" in
  tune)
    rc=0
    # CuTe sm90 decode slots (M <= 16, M <= 64): tile.m 16 / 32 / 64, swap_ab, schedule, stages
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 1x8192x8192,16x8192x8192,32x8192x8192,64x4096x14336 || rc=1
    # ... and M <= 128 (the prefill space's tile.k and cluster, with swap_ab and small tiles added by knob)
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 128x8192x8192,128x14336x4096 \
      --knob tile.m=16,32,64,128 --knob tile.n=64,128 --knob cute.swap_ab=false,true --knob cute.schedule=cooperative,pingpong || rc=1
    tune specs/catalogue.toml --kernel gemm_fp8_rowwise --target cute:sm90 --shapes 1x8192x8192,16x8192x8192 || rc=1
    # Mosaic GPU decode variants (M <= 16, M <= 128): 64-row tiles, K one or two swizzle rows, deep pipelines
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target pallas:gpu_sm90 --shapes 1x8192x8192,16x8192x8192,128x8192x8192,128x14336x4096 \
      --knob tile.m=64 --knob tile.n=64,128 --knob tile.k=64,128 --knob pipeline.ab_stages=4,6,8 --knob cluster.m=1 || rc=1
    save
    exit $rc
    ;;
  tune2)
    # the second pass: new slots (fp8 M <= 128 on CuTe, M <= 64 on Mosaic GPU), the fp8 M <= 16 slot with its
    # cluster swept, gemm_bias_gelu_bf16's CuTe M <= 16 slot with swap_ab; then `check` as above
    rc=0
    tune specs/catalogue.toml --kernel gemm_fp8_rowwise --target cute:sm90 --shapes 1x8192x8192,16x8192x8192,128x8192x8192 \
      --knob tile.m=16,32,64 --knob tile.n=64,128,256 --knob cute.swap_ab=false,true --knob cluster.m=1,2 || rc=1
    tune specs/catalogue.toml --kernel gemm_bias_gelu_bf16 --target cute:sm90 --shapes 1x8192x8192,16x8192x8192 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target pallas:gpu_sm90 --shapes 32x8192x8192,64x4096x14336 \
      --knob tile.m=64 --knob tile.n=64,128 --knob tile.k=64,128 --knob pipeline.ab_stages=4,6,8 --knob cluster.m=1 || rc=1
    save
    exit $rc
    ;;
  tune3)
    rc=0
    # CuTe sm90's default (N > 4096) and N <= 4096 slots of gemm_bf16 on the large shapes alone
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 \
      --shapes 8192x8192x8192,4096x14336x4096,4096x4096x4096,2048x2048x2048,8192x1024x8192 \
      --knob tile.m=128,256 --knob tile.n=128,192,256 || rc=1
    # CuTe fp8's M <= 1024, N <= 4096 slot (512x2048x2048: the issue's >= 1.0x shape)
    tune specs/catalogue.toml --kernel gemm_fp8_rowwise --target cute:sm90 --shapes 512x2048x2048,1024x4096x8192 || rc=1
    save
    exit $rc
    ;;
  tune4)
    rc=0
    # Triton's default and its new N <= 4096 slot of gemm_bf16 on the large shapes
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target triton:sm90 \
      --shapes 8192x8192x8192,4096x14336x4096,4096x4096x4096,2048x2048x2048,8192x1024x8192 || rc=1
    # Mosaic GPU: gemm_bf16's M <= 128, K <= 4096 slot; gemm_fp8_rowwise's decode slots, then its M <= 1024 slot
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target pallas:gpu_sm90 --shapes 128x14336x4096 \
      --knob tile.m=64 --knob tile.n=64,128,256 --knob tile.k=64,128 --knob pipeline.ab_stages=4,6,8 --knob cluster.m=1 || rc=1
    tune specs/catalogue.toml --kernel gemm_fp8_rowwise --target pallas:gpu_sm90 --shapes 1x8192x8192,16x8192x8192,128x8192x8192 \
      --knob tile.m=64 --knob tile.n=64,128,256 --knob tile.k=128,256 --knob pipeline.ab_stages=4,6,8 --knob cluster.m=1 || rc=1
    tune specs/catalogue.toml --kernel gemm_fp8_rowwise --target pallas:gpu_sm90 --shapes 512x2048x2048 \
      --knob tile.m=64,128 --knob tile.n=128,256 --knob tile.k=128 --knob pipeline.ab_stages=4,6 --knob cluster.m=1,2 || rc=1
    save
    exit $rc
    ;;
  tune5)
    rc=0
    # session 11: CuTe's split-K in the cluster (schedule.split_k) on gemm_bf16's swapped decode slots: the new
    # M <= 64, N <= 4096 slot (64x4096x14336: 64 tiles for 132 SMs), M <= 16 and M <= 64 at N = 8192
    pin="--knob cute.swap_ab=true --knob cute.schedule=cooperative --knob tile.k=64"
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 64x4096x14336 $pin \
      --knob tile.m=32,64 --knob tile.n=64,128 --knob schedule.split_k=1,2,4 --knob pipeline.ab_stages=auto || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 1x8192x8192,16x8192x8192 $pin \
      --knob tile.m=16 --knob tile.n=64,128 --knob schedule.split_k=1,2 --knob pipeline.ab_stages=auto,6 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 32x8192x8192 $pin \
      --knob tile.m=32,64 --knob tile.n=64,128 --knob schedule.split_k=1,2 --knob pipeline.ab_stages=auto || rc=1
    save
    exit $rc
    ;;
  tune6)
    rc=0
    # session 11, after tune5: cuBLAS runs these shapes on 64x8 / 64x16 / 64x32 tiles with 16 stages in 2x1
    # clusters (kernel names in the bench records); the swapped slots with deeper pipelines and the small
    # operand multicast (spec cluster.n: the kernel's cluster_m when swapped)
    pin="--knob cute.swap_ab=true --knob cute.schedule=cooperative --knob tile.k=64 --knob schedule.split_k=1"
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 1x8192x8192,16x8192x8192 $pin \
      --knob tile.m=16 --knob tile.n=64,128 --knob pipeline.ab_stages=8,12,16 --knob cluster.n=1,2 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 32x8192x8192 $pin \
      --knob tile.m=32,64 --knob tile.n=64,128 --knob pipeline.ab_stages=8,12 --knob cluster.n=1,2 || rc=1
    save
    exit $rc
    ;;
  tune7)
    rc=0
    # session 11: the fused bias + GELU kernel's prefill configs. Its CuTe default was still session 6's
    # cooperative 128x256 without a cluster (gemm_bf16 re-tuned since); ping-pong would run one warpgroup's
    # epilogue under the other's mainloop. Triton: the subtiled epilogue store on or off.
    tune specs/catalogue.toml --kernel gemm_bias_gelu_bf16 --target cute:sm90 --shapes 8192x8192x8192,4096x4096x4096 \
      --knob tile.m=128 --knob tile.n=128,192,256 --knob tile.k=64 --knob cluster.m=1,2 --knob cute.schedule=cooperative,pingpong || rc=1
    tune specs/catalogue.toml --kernel gemm_bias_gelu_bf16 --target triton:sm90 --shapes 8192x8192x8192,4096x4096x4096 \
      --knob triton.epilogue_subtile=false,true || rc=1
    save
    exit $rc
    ;;
  tune8)
    rc=0
    # session 12: the CuTe decode slots' K step. Every earlier pass pinned tile.k = 64 (one 128-byte swizzle row
    # of bf16), so each B row is read 128 bytes at a time; Triton's M <= 16 tile reads 512 (k = 256).
    pin="--knob cute.swap_ab=true --knob cute.schedule=cooperative --knob pipeline.ab_stages=auto"
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 1x8192x8192,16x8192x8192 $pin \
      --knob tile.m=16 --knob tile.n=64,128 --knob tile.k=64,128,256 --knob schedule.split_k=1 --knob cluster.n=1 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 32x8192x8192 $pin \
      --knob tile.m=64 --knob tile.n=64,128 --knob tile.k=64,128,256 --knob schedule.split_k=1 --knob cluster.n=1 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 64x4096x14336 $pin \
      --knob tile.m=64 --knob tile.n=64 --knob tile.k=64,128 --knob schedule.split_k=2 --knob cluster.n=1 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 128x8192x8192,128x14336x4096 $pin \
      --knob tile.m=64 --knob tile.n=128 --knob tile.k=64,128 --knob schedule.split_k=1 || rc=1
    save
    exit $rc
    ;;
  tune9)
    rc=0
    # session 12, on an H200: the decode slots that read below 0.95 there while tuned on H100s (Triton's and
    # CuTe's M <= 64 at 32x8192x8192, CuTe's M <= 128 at 128x14336x4096, Mosaic GPU's M <= 16)
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target triton:sm90 --shapes 32x8192x8192 \
      --knob tile.m=16,32,64 --knob tile.n=64,128 --knob tile.k=128,256 --knob pipeline.ab_stages=3,4,5 --knob triton.swap_ab=false,true || rc=1
    pin="--knob cute.swap_ab=true --knob cute.schedule=cooperative --knob pipeline.ab_stages=auto --knob schedule.split_k=1"
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 32x8192x8192 $pin \
      --knob tile.m=32,64 --knob tile.n=64,128 --knob tile.k=64,128 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 128x14336x4096,128x8192x8192 $pin \
      --knob tile.m=64 --knob tile.n=64,128,256 --knob tile.k=64,128 --knob cluster.m=1,2 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target pallas:gpu_sm90 --shapes 1x8192x8192,16x8192x8192 \
      --knob tile.m=64 --knob tile.n=64,128 --knob tile.k=64,128 --knob pipeline.ab_stages=4,6,8,10 --knob cluster.m=1 || rc=1
    save
    exit $rc
    ;;
  tune10)
    rc=0
    # session 12: CuTe's M <= 128, K <= 4096 slot (128x14336x4096: N / 128 = 112 tiles, 224 of 64x128 for 132 SMs;
    # cuBLAS runs 112-wide tiles, one wave). Whole waves from what the design has: 128-row or 256-column tiles,
    # split-K in two across the cluster.
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 128x14336x4096 \
      --knob tile.m=64,128 --knob tile.n=128,256 --knob tile.k=64 --knob schedule.split_k=1,2 --knob cute.swap_ab=false,true \
      --knob cute.schedule=cooperative --knob cluster.m=1,2 --knob pipeline.ab_stages=auto || rc=1
    save
    exit $rc
    ;;
  tune11)
    rc=0
    # session 12: knobs no earlier pass swept on the large shapes. Triton's default: the flattened persistent
    # loop (tl.range flatten=True: the next tile's loads pipelined under this tile's epilogue), the subtiled
    # epilogue store, group_m; CuTe's two prefill slots: the tile order (group_m, raster). Tiles pinned.
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target triton:sm90 --shapes "$LARGE" \
      --knob tile.m=128 --knob tile.n=256 --knob tile.k=64 --knob triton.num_warps=8 --knob pipeline.ab_stages=auto,3,4 \
      --knob triton.flatten=false,true --knob triton.epilogue_subtile=false,true --knob schedule.group_m=8,16 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 8192x8192x8192,4096x14336x4096 \
      --knob tile.m=128 --knob tile.n=192 --knob tile.k=64 --knob cluster.m=2 --knob cute.schedule=pingpong \
      --knob schedule.group_m=4,8,16 --knob schedule.raster=along_m,along_n || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 4096x4096x4096,2048x2048x2048,8192x1024x8192 \
      --knob tile.m=128 --knob tile.n=256 --knob tile.k=64 --knob cluster.m=2 --knob cute.schedule=cooperative \
      --knob schedule.group_m=4,8,16 --knob schedule.raster=along_m,along_n || rc=1
    save
    exit $rc
    ;;
  tune12)
    rc=0
    # session 12: CuTe's M <= 128, K <= 4096 slot again, now that a tile may be 112 wide (16-column epilogue
    # subtiles): 128x14336x4096 in 128 tiles, one wave, as cuBLAS's 112x128 kernel runs it
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target cute:sm90 --shapes 128x14336x4096 \
      --knob tile.m=64,128 --knob tile.n=112,128 --knob tile.k=64 --knob cute.swap_ab=false,true --knob cluster.m=1,2 \
      --knob cute.schedule=cooperative,pingpong --knob schedule.split_k=1 --knob pipeline.ab_stages=auto || rc=1
    save
    exit $rc
    ;;
  tune13)
    rc=0
    # session 13: Mosaic GPU's decode slots with pallas.swap_ab (out^T = B^T A^T: N on wgmma's rows, M = 8..64 on
    # its columns), bf16 M <= 16 and M <= 64, fp8 M <= 16; the incumbents are 64-row tiles, unswapped
    pin="--knob cluster.m=1 --knob pipeline.ab_stages=auto,6"
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target pallas:gpu_sm90 --shapes 1x8192x8192,16x8192x8192 $pin \
      --knob pallas.swap_ab=true --knob tile.m=8,16 --knob tile.n=128,256 --knob tile.k=128,256 || rc=1
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target pallas:gpu_sm90 --shapes 32x8192x8192,64x4096x14336 $pin \
      --knob pallas.swap_ab=true --knob tile.m=32,64 --knob tile.n=128,256 --knob tile.k=64,128 || rc=1
    tune specs/catalogue.toml --kernel gemm_fp8_rowwise --target pallas:gpu_sm90 --shapes 1x8192x8192,16x8192x8192 $pin \
      --knob pallas.swap_ab=true --knob tile.m=16 --knob tile.n=128,256 --knob tile.k=128,256 || rc=1
    save
    exit $rc
    ;;
  tune14)
    rc=0
    # session 13, on an H100: the swapped Mosaic GPU M <= 16 slots that tune13 picked on an H200, against their
    # neighbours (tile.m 8 / 16, tile.n 128 / 256, K step, stages), bf16 and fp8
    pin="--knob cluster.m=1 --knob pallas.swap_ab=true --knob pipeline.ab_stages=auto,4,6,8"
    tune specs/gemm_bf16.toml --kernel gemm_bf16 --target pallas:gpu_sm90 --shapes 1x8192x8192,16x8192x8192 $pin \
      --knob tile.m=8,16 --knob tile.n=128,256 --knob tile.k=128,256 || rc=1
    tune specs/catalogue.toml --kernel gemm_fp8_rowwise --target pallas:gpu_sm90 --shapes 1x8192x8192,16x8192x8192 $pin \
      --knob tile.m=8,16 --knob tile.n=128,256 --knob tile.k=128,256 || rc=1
    save
    exit $rc
    ;;
  tune15)
    rc=0
    # session 13: a CuTe fp8 M <= 512, N <= 2048 slot (added by hand as a copy of M <= 1024, N <= 4096's entry):
    # 512x2048x2048 ran 10.0-10.4 us on 64 ping-pong 128x128 tiles where Triton's 128 tiles of 64x128 take 7.0-7.3
    tune specs/catalogue.toml --kernel gemm_fp8_rowwise --target cute:sm90 --shapes 512x2048x2048,256x2048x2048 \
      --knob tile.m=64,128 --knob tile.n=64,128 --knob tile.k=128,256 --knob cute.schedule=cooperative,pingpong \
      --knob cluster.m=1,2 --knob pipeline.ab_stages=auto || rc=1
    save
    exit $rc
    ;;
  check|tests|table)
    # the tuned specs (copied above, if a `tune` ran on this machine), rendered; the whole GPU test suite; the table
    python3 -m specgen render 2>&1 | tail -1 | tee "$out/render.log"
    git diff --stat -- specs generated | tail -1 | tee -a "$out/render.log"
    tests=0
    if [ "$1" != table ]; then
      timeout "${TEST_TIMEOUT:-330}" python3 -m pytest tests/gpu tests/conformance tests/backends -m gpu -q -p no:cacheprovider -n 8 \
        --dist loadgroup 2>&1 | tee "$out/gpu-tests.log" | tail -25
      tests=${PIPESTATUS[0]}
      [ "$1" = tests ] && exit "$tests"
    fi
    rc=0
    # FLUSH=read times the table with the L2 left clean before each call (specgen bench --flush; files -read.*)
    fl=${FLUSH:-write} sfx=${FLUSH:+-$FLUSH}
    python3 -m specgen bench gemm_bf16 --shapes "$DECODE,$LARGE" --rounds 20 --flush "$fl" --json "$out/bench-bf16$sfx.json" 2>&1 | tee "$out/bench-bf16$sfx.log" || rc=1
    python3 -m specgen bench gemm_fp8_rowwise --shapes "$FP8" --rounds 20 --flush "$fl" --json "$out/bench-fp8$sfx.json" 2>&1 | tee "$out/bench-fp8$sfx.log" || rc=1
    for t in cute:sm90 pallas:gpu_sm90; do
      python3 gpu/bench_variants.py --kernel gemm_bf16 --target "$t" --shapes "$DECODE" --rounds 20 --out "$out" 2>&1 \
        | tee "$out/bench-variants-${t//:/_}.log" || rc=1
    done
    exit $(( tests || rc ))
    ;;
  *) echo "usage: gpu/decode.sh tune|tune2|tune3|tune4|tune5|tune6|tune7|tune8|tune9|tune10|tune11|tune12|tune13|tune14|tune15|check|tests|table" >&2; exit 2 ;;
esac
