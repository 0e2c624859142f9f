#!/usr/bin/env bash
# gpu/tune_multi.sh on a leased GPU host with no network (issue 39): the wheels it needs (ray, the CuTe DSL,
# specgen's deps: `../shared/tools/gpu-wheel-bundle .gpuwheels PKG==VER ...` splits them into .gpuwheels/a,
# b, ... of 48 MB) travel one part per call into $STAGE, which survives while the machine stays warm, so the
# calls go back to back; the first `run` joins and installs them into $SITE, then runs.
#   gpu/tune_multi_lease.sh stage          copy the carried parts into $STAGE (and say what the host is)
#   gpu/tune_multi_lease.sh run NAME ...   install if not done, then those runs of gpu/tune_multi.sh (RUNS,
#                                          ROUNDS, ... pass through), no comparison there (it runs here on the
#                                          CPU, COMPARE_ONLY=1), everything it wrote tarred into $OUT
# CALL_S (570): the seconds this call may take in all (a call runs at most 600 s); the runs get what the
# install leaves.
set -uo pipefail
t0=$(date +%s)
stage=${STAGE:-/tmp/stage} site=${SITE:-/tmp/site} results=${RESULTS:-/tmp/multi}
mkdir -p "$stage"
for p in .gpuwheels/*/wheels.tar.part-*; do [ -e "$p" ] && cp "$p" "$stage/"; done
ls -l "$stage"
case ${1:-} in
  stage)
    nvidia-smi -L
    echo "nproc $(nproc)"
    ;;
  run)
    shift
    if [ ! -e "$site/.installed" ]; then
      cat "$stage"/wheels.tar.part-* > "$stage/wheels.tar" && mkdir -p "$stage/w" \
        && tar -xf "$stage/wheels.tar" -C "$stage/w" \
        && python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$stage"/w/*.whl \
        && touch "$site/.installed" || exit 1
      echo "installed in $(( $(date +%s) - t0 )) s"
    fi
    # the CuTe DSL puts dsl_packages on sys.path through a .pth file, which --target installs do not run
    export PYTHONPATH="$site:$site/nvidia_cutlass_dsl/dsl_packages"
    export BUDGET_S=$(( ${CALL_S:-570} - ($(date +%s) - t0) ))
    RESULTS=$results ONLY="$*" NO_COMPARE=1 bash gpu/tune_multi.sh
    rc=$?
    tar -czf "${OUT:-/tmp}/multi-results.tgz" -C "$results" .
    exit "$rc"
    ;;
  *)
    echo "usage: $0 stage | run NAME ..." >&2
    exit 2
    ;;
esac
