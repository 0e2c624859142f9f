#!/usr/bin/env bash
# Issues 22 and 39 in one script, on one host with GPUs of one kind: `specgen tune --ray` over catalogue
# GEMM kernels on triton:sm90 and cute:sm90, one run for all of them (one local Ray cluster: compile tasks on
# every core but one per GPU, one timing actor per GPU, compiles streamed into the timings), repeated on
# 1, 2 and 4 GPUs and once more on 4 GPUs with one timing actor's process killed (kill -9 by its pid) part way
# into the timings: the tune must finish with a result for every candidate the baseline timed. Each run has a
# fresh cache, module folder and compiler caches (Triton's, specgen's CuTe cache, the CuTe DSL's), so nothing
# of one run is a hit for the next. Then the winners of every run compared with the baseline's (the first
# run) by the tuner's own selection from each run's cache (same pick, or within each other's paired interval
# vs the incumbent, whose own interval is the A/A spread), and $RESULTS/multi.md written: GPUs, compile
# workers, candidates, wall time, speedup, each GPU's busy time, where the wall time went, winners, the killed
# actor's outcome (also $RESULTS/multi.json).
# Needs torch and triton with CUDA, ray, the CuTe DSL and specgen's deps importable (the caller puts them on
# PYTHONPATH, e.g. /tmp/site); installs nothing; writes nothing into specs/ (no --write).
# Knobs (env):
#   RUNS     NAME:DEVICES[:kill] ... ("A:0 B:0,1 C:0,1,2,3 D:0,1,2,3:kill"; the first is the baseline)
#   ONLY     the runs to execute now (default: all of RUNS); the others keep what $RESULTS holds from an
#            earlier call (the machine kept warm between calls), and the comparison covers every run with results
#   SPECS (gemm_bf16 gemm_fp8_rowwise), TARGETS (triton:sm90 cute:sm90), SHAPES (128x8192x8192,8192x8192x8192:
#   a variant's slot and the default's), KNOBS (space-separated --knob values; default none: each design's
#   space), ROUNDS (100), KILL_AT (0.4 of the baseline's timings), BUDGET_S (560: the runs of this call share
#   it), SCRATCH (/tmp/tune_multi: each run's cache, modules and compiler caches), RESULTS (${OUT:-out/multi}),
#   COMPARE_ONLY=1 (no runs: the comparison and multi.md again from what $RESULTS holds, e.g. on a CPU machine
#   from the files the GPU run sent back), NO_COMPARE=1 (the runs only: compare elsewhere, GPU time saved).
set -uo pipefail
out=${RESULTS:-${OUT:-out/multi}}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_INTERPRET=0 RAY_USAGE_STATS_ENABLED=0
runs=${RUNS:-A:0 B:0,1 C:0,1,2,3 D:0,1,2,3:kill}
names=""
for r in $runs; do names="$names ${r%%:*}"; done
only=${ONLY:-$names}
specs=${SPECS:-gemm_bf16 gemm_fp8_rowwise}
targets=${TARGETS:-triton:sm90 cute:sm90}
shapes=${SHAPES:-128x8192x8192,8192x8192x8192}
knobs=${KNOBS:-}
rounds=${ROUNDS:-100}
kill_at=${KILL_AT:-0.4}
budget=${BUDGET_S:-560}
scratch=${SCRATCH:-/tmp/tune_multi}
knob_args=() target_args=()
for k in $knobs; do knob_args+=(--knob "$k"); done
for t in $targets; do target_args+=(--target "$t"); done
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }

[ -n "${COMPARE_ONLY:-}" ] || [ -s "$out/machine.txt" ] || {
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv \
    || echo "nvidia-smi: not available"
  echo "nproc: $(nproc)"
  python3 -c 'import sys, ray, torch, triton, cutlass; print(f"python {sys.version.split()[0]}, ray {ray.__version__}, torch {torch.__version__}, triton {triton.__version__}, nvidia-cutlass-dsl {cutlass.__version__}")'
  echo "space: $specs on $targets, shapes $shapes, knobs ${knobs:-none (each design space)}, rounds $rounds"
} 2>&1 | tee "$out/machine.txt"

ray_gone() {  # the last run's local Ray cluster gone (a run stopped by its time limit may leave it): the next
  local pids                # run starts clean, and a kill run's pgrep finds only its own actors
  for _ in $(seq 60); do pgrep -f '^ray::|/raylet|gcs_server' > /dev/null || return 0; sleep 0.5; done
  pids=$(pgrep -f '^ray::|/raylet|gcs_server')
  echo "Ray processes left by the last run, killed: $(echo $pids)"
  for p in $pids; do kill -9 "$p" 2> /dev/null; done
  sleep 2
}

count_timings() { local n; n=$(grep -c '"kind":"time"' "$1" 2> /dev/null); echo "${n:-0}"; }

# each stdout line stamped with the seconds since the run started (where the wall time went)
stamp() { python3 -u -c 'import sys, time
t0 = float(sys.argv[1])
for line in sys.stdin:
    print(f"{time.time() - t0:8.2f} {line}", end="", flush=True)' "$1"; }

# one tune: NAME DEVICES LIMIT_S [KILL_AFTER_N_TIMINGS]; stdout (the results, the busy lines; each line
# stamped) in NAME.log, stderr (Ray, the progress bars) in NAME.err, wall time and exit status in
# NAME/wall.txt, the cache copied to NAME/cache.jsonl
run_tune() {
  local name=$1 devs=$2 limit=$3 kill_after=${4:-} dir="$out/$1" work="$scratch/$1" killed="" n victim title
  rm -rf "$dir" "$work" "$out/$name.log" "$out/$name.err"
  mkdir -p "$dir" "$work"
  if [ "$limit" -lt 30 ]; then
    echo "$name: skipped, $limit s left of BUDGET_S=$budget" | tee "$dir/skipped.txt"
    return 1
  fi
  ray_gone
  echo "== run $name: CUDA_VISIBLE_DEVICES=$devs, limit ${limit} s$([ -n "$kill_after" ] && echo ", kill one timing actor after $kill_after timings")"
  local t0 t1 rc
  t0=$(date +%s.%N)
  ( CUDA_VISIBLE_DEVICES=$devs TRITON_CACHE_DIR="$work/triton-cache" SPECGEN_CUTE_CACHE="$work/cute-cache" \
    CUTE_DSL_CACHE_DIR="$work/cute-dsl-cache" timeout -k 20 "$limit" \
    python3 -m specgen tune $specs "${target_args[@]}" --shapes "$shapes" "${knob_args[@]}" --rounds "$rounds" \
    --ray --cache "$work/cache.jsonl" 2> "$out/$name.err" | stamp "$t0" > "$out/$name.log" ) &
  local pid=$!
  while kill -0 "$pid" 2> /dev/null; do
    if [ -n "$kill_after" ] && [ -z "$killed" ]; then
      n=$(count_timings "$work/cache.jsonl")
      if [ "$n" -ge "$kill_after" ]; then  # an actor in the middle of a job if one is, else any of them
        victim=$(pgrep -f '^ray::TimingActor\.measure' | head -1)
        [ -n "$victim" ] || victim=$(pgrep -f '^ray::TimingActor' | head -1)
        title=$(ps -o args= -p "$victim" 2> /dev/null | cut -c1-60)
        if [ -n "$victim" ] && kill -9 "$victim"; then
          killed=$victim
          echo "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s into the run, kill -9 pid $victim ($title) after $n timings" \
            | tee "$dir/killed.txt"
        fi
      fi
    fi
    sleep 0.5
  done
  wait "$pid"
  rc=$?
  t1=$(date +%s.%N)
  cp "$work/cache.jsonl" "$dir/" 2> /dev/null
  awk -v a="$t0" -v b="$t1" -v rc="$rc" 'BEGIN { printf "%.2f %d\n", b - a, rc }' > "$dir/wall.txt"
  echo "$name: exit $rc, wall $(cut -d' ' -f1 "$dir/wall.txt") s, $(count_timings "$dir/cache.jsonl") timings cached"
  grep -E '^ *[0-9.]+ (Ray cluster|stream|GPU |actor |gemm|bmm)' "$out/$name.log"
  [ "$rc" -eq 0 ] || tail -20 "$out/$name.err"
  return "$rc"
}

status=0
if [ -z "${COMPARE_ONLY:-}" ]; then
  base=${runs%% *}
  for r in $runs; do
    IFS=: read -r name devs kill <<< "$r"
    case " $only " in *" $name "*) ;; *) continue ;; esac
    kill_after=""
    if [ "$kill" = kill ]; then
      expected=$(count_timings "$out/${base%%:*}/cache.jsonl")
      kill_after=$(awk -v n="$expected" -v f="$kill_at" 'BEGIN { k = int(n * f + 0.5); print (k < 1 ? 1 : k) }')
    fi
    run_tune "$name" "$devs" $(( $(left) - 10 )) $kill_after || status=1
  done
  ray_gone
fi

if [ -n "${NO_COMPARE:-}" ]; then
  echo "total $(( $(date +%s) - start )) s; runs $status; no comparison (NO_COMPARE)"
  exit "$status"
fi
# the comparison: winners chosen from each run's cache by the tuner's own selection (`tune` with no
# measurer: what --from-cache does), each pick's interval vs the incumbent from the same cache
python3 - "$out" "$specs" "$targets" "$shapes" "$knobs" "$rounds" "$runs" << 'EOF' 2>&1 | tee "$out/compare.log"
import json
import re
import sys
from pathlib import Path

from specgen.bench.shapes import parse_shapes
from specgen.bench.stats import geomean
from specgen.spec.load import load_file
from specgen.spec.models import parse_target
from specgen.tune.cache import Cache, semantics
from specgen.tune.run import TuneError, tune
from specgen.tune.space import parse_knobs

out, specs, targets, shapes, knobs, rounds, runs_arg = (Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3].split(),
                                                        sys.argv[4], sys.argv[5].split(), sys.argv[6], sys.argv[7].split())
catalogue = {ls.name: ls for f in sorted(Path("specs").glob("*.toml")) for ls in load_file(f)}
STAMP = r"^ *([\d.]+) "
BUSY = re.compile(STAMP + r"GPU (\S+) \(pid (\S+)\): (\d+) jobs, busy ([\d.]+) s of ([\d.]+) s wall \((\d+)%\)(.*)$", re.M)
STREAM = re.compile(STAMP + r"stream: (\d+) compiles on (\d+) workers landed from ([\d.-]+)(?: s)? to ([\d.-]+)(?: s)?, "
                    r"(\d+) timings from ([\d.-]+)(?: s)? to ([\d.-]+)(?: s)?, ([\d.]+) s in all", re.M)


def short(c: dict) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in c.items())


def interval(cache: Cache, sem: str, target: str, shps: list, config: dict) -> tuple[float, float, float] | None:
    """Geomean over the slot's shapes of (ratio, ratio_lo, ratio_hi) vs the incumbent, paired per round."""
    es = [e for e in cache.entries.values() if e.kind == "time" and e.semantics == sem and e.target == target
          and e.config == config and e.shape is not None and e.shape in shps and not e.error]
    if len(es) != len(shps):
        return None
    return geomean(e.ratio for e in es), geomean(e.ratio_lo for e in es), geomean(e.ratio_hi for e in es)


def num(x: str) -> float | None:
    return None if x == "-" else float(x)


runs: dict[str, dict] = {}
for item in runs_arg:
    name, devs, *kill = item.split(":")
    d = out / name
    r: dict = {"devices": devs, "gpus": len(devs.split(",")), "kill": bool(kill), "ran": (d / "wall.txt").exists()}
    runs[name] = r
    if not r["ran"]:
        continue
    wall, rc = (d / "wall.txt").read_text().split()
    log = (out / f"{name}.log").read_text()
    r.update(wall_s=float(wall), rc=int(rc))
    m = re.search(STAMP + r"Ray cluster: (\d+) CPUs \((\d+) compile tasks at a time\), (\d+) GPUs", log, re.M)
    r["ray_up_s"], r["ray_cpus"], r["compile_workers"], r["ray_gpus"] = (
        (float(m[1]), int(m[2]), int(m[3]), int(m[4])) if m else (None, None, None, None))
    r["busy"] = [{"gpu": g, "pid": p, "jobs": int(j), "busy_s": float(b), "wall_s": float(w), "pct": int(pc),
                  "restarted": "restarted" in rest, "died_under": "died under" in rest}
                 for _, g, p, j, b, w, pc, rest in BUSY.findall(log)]
    r["events"] = re.findall(STAMP + r"(actor \d+'s process died.*)$", log, re.M)
    s = STREAM.search(log)
    if s:  # stream start = the stamp of its line less its length (the line follows the stream's end closely)
        at, end = float(s[1]), float(s[9])
        r["stream"] = {"compiles": int(s[2]), "workers": int(s[3]), "first_compile_s": num(s[4]),
                       "last_compile_s": num(s[5]), "timings": int(s[6]), "first_timing_s": num(s[7]),
                       "last_timing_s": num(s[8]), "length_s": end, "start_s": at - end}
        r["before_stream_s"] = at - end
        r["after_stream_s"] = r["wall_s"] - at
    cache = Cache(d / "cache.jsonl")
    times = [e for e in cache.entries.values() if e.kind == "time"]
    r["timings"], r["failed_timings"] = len(times), sum(bool(e.error) for e in times)
    r["compile_s"] = sum(e.seconds for e in cache.entries.values() if e.kind == "compile")
    # a candidate is a config in a slot (a slot's own incumbent tells the slots apart); one compile serves a
    # config in every slot it is a candidate of
    r["candidates"] = len({(e.semantics, e.target, e.config_key, e.incumbent_key) for e in times if not e.error})
    r["compiled"] = sum(e.kind == "compile" for e in cache.entries.values())
    r["keys"] = {e.key: bool(e.error) for e in times}
    r["picks"] = {}
    for spec in specs:
        loaded = catalogue[spec]
        for t in targets:
            try:
                rep = tune(loaded, [parse_target(t)], parse_shapes(shapes, "gemm"), cache=cache, machine=None, compiler=None,
                           measurer=None, overrides=parse_knobs(knobs))
            except TuneError as e:
                r["picks"][f"{spec} {t}"] = {"error": str(e)}
                continue
            sem = semantics(loaded.spec)
            for sl in rep.slots:
                pick = sl.winner or sl.incumbent
                shp = [tuple(x) for x in sl.shapes]
                r["picks"][f"{spec} {t} {sl.label}"] = {
                    "config": pick, "kept_incumbent": sl.winner is None, "timed": sl.timed, "shapes": shp,
                    "sem": sem, "target": t, "aa": interval(cache, sem, t, shp, sl.incumbent),
                    "score": interval(cache, sem, t, shp, pick)}
    r["cache"] = cache

names = list(runs)
base = runs[names[0]]


def agree(x: str, y: str, slot: str) -> str:
    px, py = runs[x]["picks"].get(slot), runs[y]["picks"].get(slot)
    if not px or not py or "error" in px or "error" in py:
        return "n/a"
    if px["config"] == py["config"]:
        return "same pick"
    notes, ok = [], True
    for run in (x, y):  # in each run's cache: do the two picks' intervals vs the incumbent overlap?
        c = runs[run]["cache"]
        ix, iy = (interval(c, px["sem"], px["target"], px["shapes"], p["config"]) for p in (px, py))
        if ix is None or iy is None:
            ok = False
            notes.append(f"{run}: not both timed")
            continue
        overlap = ix[1] <= iy[2] and iy[1] <= ix[2]
        ok &= overlap
        notes.append(f"in {run} {x}'s pick {ix[0]:.3f} [{ix[1]:.3f}, {ix[2]:.3f}], {y}'s {iy[0]:.3f} [{iy[1]:.3f}, {iy[2]:.3f}]")
    return ("within the paired spread" if ok else "DIFFERENT (intervals apart)") + ": " + "; ".join(notes)


def fmt_pick(p: dict | None) -> str:
    if not p:
        return "-"
    if "error" in p:
        return "error: " + p["error"][:60]
    sc = p["score"]
    return short(p["config"]) + (" (incumbent kept)" if p["kept_incumbent"] else
                                 f" ({sc[0]:.3f}x, low end {sc[1]:.3f})" if sc else "")


def f1(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


md = ["# `specgen tune --ray` on one host's GPUs (issues 22, 39)", "",
      "```", (out / "machine.txt").read_text().strip(), "```", "",
      f"Space: {', '.join(specs)} on {', '.join(targets)}, shapes {shapes}, knobs {' '.join(knobs) or '(each design space)'}, "
      f"{rounds} paired rounds per timing; each run one `specgen tune --ray` for all of them with a fresh cache, "
      "module folder and compiler caches. Timing phase: from the stream's start (compiles and timings) to the last "
      "result; the wall time adds Python's and Ray's start before it and the summaries, the actors' stats and "
      "Ray's shutdown after it.", "",
      "| run | GPUs (Ray's count) | compile workers (Ray CPUs) | candidates timed (kernels compiled) | timings (failed) | wall s | "
      "speedup (wall, vs the first) | wall vs the first | timing phase s | before / after the stream s | "
      "first compile, first timing, last compile s | per-GPU busy (driver-counted, of the timing phase) | exit |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for name, r in runs.items():
    if not r["ran"]:
        md.append(f"| {name} | not run |" + " |" * 11)
        continue
    vs = r["wall_s"] / base["wall_s"] if base.get("wall_s") else None
    st = r.get("stream", {})
    busy = "; ".join(f"GPU {b['gpu']}: {b['jobs']} jobs, {b['busy_s']:.1f} s ({b['pct']}%)"
                     + (", restarted" if b["restarted"] else "") for b in r["busy"]) or "-"
    label = f"{name} ({r['gpus']} GPU{'s' * (r['gpus'] > 1)}{', actor killed' if r['kill'] else ''})"
    md.append(f"| {label} | {r['gpus']} ({r['ray_gpus']}) | {r['compile_workers']} ({r['ray_cpus']}) | {r['candidates']} ({r['compiled']}) | "
              f"{r['timings']} ({r['failed_timings']}) | {r['wall_s']:.1f} | {f'{1 / vs:.2f}x' if vs else '-'} | "
              f"{f'{vs:.2f}' if vs else '-'} | {f1(st.get('length_s'))} | {f1(r.get('before_stream_s'))} / "
              f"{f1(r.get('after_stream_s'))} | {f1(st.get('first_compile_s'))}, {f1(st.get('first_timing_s'))}, "
              f"{f1(st.get('last_compile_s'))} | {busy} | {r['rc']} |")
md += ["", f"| kernel, target, slot | " + " | ".join(names) + f" | A/A spread in {names[0]} (incumbent vs itself) | "
       + " | ".join(f"{n} vs {names[0]}" for n in names[1:]) + " |", "|---" * (2 * len(names) + 1) + "|"]
for slot in base.get("picks", {}):
    aa = base["picks"][slot].get("aa")
    md.append(f"| {slot} | " + " | ".join(fmt_pick(runs[n].get("picks", {}).get(slot)) for n in names)
              + f" | {f'[{aa[1]:.4f}, {aa[2]:.4f}]' if aa else '-'} | "
              + " | ".join(agree(names[0], n, slot) if runs[n]["ran"] else "-" for n in names[1:]) + " |")

verdict: dict = {"ratios": {}, "winners_agree": {}}
for name, r in runs.items():
    if name == names[0] or not r["ran"] or not base.get("wall_s"):
        continue
    ratio = r["wall_s"] / base["wall_s"]
    verdict["ratios"][name] = ratio
    bound = {2: 0.6, 4: 0.35}.get(r["gpus"]) if not r["kill"] else None
    if bound:
        md.append(f"- {r['gpus']} GPUs vs 1, wall time: {ratio:.2f}x (issue 39: <= {bound}x): "
                  f"{'met' if ratio <= bound else 'NOT met'}")
    verdict["winners_agree"][name] = all(not agree(names[0], name, s).startswith(("DIFFERENT", "n/a"))
                                         for s in base.get("picks", {}))
for name, r in runs.items():
    if r["ran"] and r["ray_gpus"] is not None and r["ray_gpus"] != r["gpus"]:
        md.append(f"- run {name}: Ray counted {r['ray_gpus']} GPUs for CUDA_VISIBLE_DEVICES={r['devices']}")
for name, r in runs.items():
    if not r["ran"] or not r["kill"]:
        continue
    killed = (out / name / "killed.txt").read_text().strip() if (out / name / "killed.txt").exists() else ""
    done_base = {k for k, err in base.get("keys", {}).items() if not err}
    missing = sorted(done_base - {k for k, err in r["keys"].items() if not err})
    restarted = [b for b in r["busy"] if b["restarted"]]
    ok = bool(killed) and r["rc"] == 0 and not missing and r["timings"] >= base.get("timings", 0)
    verdict[f"kill_ok_{name}"] = ok
    md += [f"- killed actor (run {name}): {killed or 'NO ACTOR WAS KILLED (none found by pgrep, or the run ended first)'}; "
           f"the tune exited {r['rc']}, {r['timings']} timings cached ({r['failed_timings']} failed) against "
           f"{names[0]}'s {base.get('timings', '?')}; {len(missing)} of {names[0]}'s finished timings missing; "
           + ("; ".join(e for _, e in r["events"]) or "no job was retried on another actor") + "; "
           + ("restarted: " + ", ".join(f"GPU {b['gpu']} (new pid {b['pid']})" for b in restarted) if restarted
              else "no restart seen in the busy lines") + f": {'OK' if ok else 'NOT OK'}"]
text = "\n".join(md) + "\n"
(out / "multi.md").write_text(text)
for r in runs.values():
    r.pop("cache", None)
    r.pop("keys", None)
(out / "multi.json").write_text(json.dumps({"runs": runs, "verdict": verdict}, indent=1, default=str))
print(text)
EOF
cmp=${PIPESTATUS[0]}
echo "total $(( $(date +%s) - start )) s; runs $status; comparison $cmp; $out/multi.md"
exit $(( status || cmp ))
