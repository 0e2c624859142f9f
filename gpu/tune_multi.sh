#!/usr/bin/env bash
# Issue 22 in one command, on one host with 2 GPUs of one kind: `specgen tune --ray` over three catalogue
# GEMM kernels (gemm_bf16, gemm_bias_gelu_bf16, gemm_fp8_rowwise) on triton:sm90 at two shapes, one run
# for all three (one local Ray cluster: compile tasks on every core, one timing actor per GPU):
#   A: GPU 0 alone (CUDA_VISIBLE_DEVICES=0)      B: both GPUs (0,1)
#   C: both GPUs, one timing actor's process killed (kill -9) ~40% into the timings: the tune must finish
#      with a result for every candidate A timed
# each with a fresh cache, module folder and Triton cache (nothing of one run is a hit for the next); then
# the winners of A, B and C compared (same pick, or within each other's paired interval vs the incumbent,
# whose own interval is the A/A spread) and $OUT/multi.md written: GPUs, compile workers, candidates, wall
# time, speedup, winners, each GPU's busy time, the killed actor's outcome (also $OUT/multi.json).
# Needs torch and triton with CUDA, ray and specgen's deps importable (the caller puts them on PYTHONPATH,
# e.g. /tmp/site); installs nothing; writes nothing into specs/ (no --write). Logs under ${OUT:-out/multi}.
# Knobs (env): ROUNDS (100), SPECS, SHAPES, KNOBS (space-separated --knob values), DEVICES_A (0),
# DEVICES_B (0,1), KILL_AT (0.4 of A's timings), BUDGET_S (520: A, B and C share it, so that the whole
# script fits a 10-minute call with the install before it), SCRATCH (/tmp/tune_multi: each run's cache,
# rendered modules and Triton cache; only the cache is copied into $OUT), COMPARE_ONLY=1 (no runs: the comparison and
# multi.md again from what $OUT holds, e.g. on a CPU machine from the files the GPU run sent back).
set -uo pipefail
out=${OUT:-out/multi}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_INTERPRET=0 RAY_USAGE_STATS_ENABLED=0
specs=${SPECS:-gemm_bf16 gemm_bias_gelu_bf16 gemm_fp8_rowwise}
shapes=${SHAPES:-8192x8192x8192,4096x14336x4096}
# 34 candidates per kernel after check (tile.k keeps each design's range: 64,128 bf16, 128,256 fp8), 102 in
# all, 204 timings: ~3 min on one H100 at 100 rounds (100: a tighter A/A than the default 40, and the
# timings, not the start-up, dominate the wall time)
knobs=${KNOBS:-tile.m=64,128 tile.n=128,256 triton.num_warps=4,8 pipeline.ab_stages=auto,3,4}
rounds=${ROUNDS:-100}
devices_a=${DEVICES_A:-0}
devices_b=${DEVICES_B:-0,1}
kill_at=${KILL_AT:-0.4}
budget=${BUDGET_S:-520}
scratch=${SCRATCH:-/tmp/tune_multi}
workers=$(nproc)  # (with --ray the compiles are Ray tasks of one CPU each: as many at once as Ray has CPUs)
knob_args=()
for k in $knobs; do knob_args+=(--knob "$k"); done
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }

[ -n "${COMPARE_ONLY:-}" ] || {
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv \
    || echo "nvidia-smi: not available"
  echo "nproc: $(nproc)"
  python3 -c 'import sys, ray, torch, triton; print(f"python {sys.version.split()[0]}, ray {ray.__version__}, torch {torch.__version__}, triton {triton.__version__}")'
  echo "space: $specs on triton:sm90, shapes $shapes, knobs $knobs, rounds $rounds"
} 2>&1 | tee "$out/machine.txt"

ray_gone() {  # the last run's local Ray cluster gone (a run stopped by its time limit may leave it): the next
  local pids                # run starts clean, and C's pgrep finds only C's actors
  for _ in $(seq 60); do pgrep -f '^ray::|/raylet|gcs_server' > /dev/null || return 0; sleep 0.5; done
  pids=$(pgrep -f '^ray::|/raylet|gcs_server')
  echo "Ray processes left by the last run, killed: $(echo $pids)"
  for p in $pids; do kill -9 "$p" 2> /dev/null; done
  sleep 2
}

count_timings() { local n; n=$(grep -c '"kind":"time"' "$1" 2> /dev/null); echo "${n:-0}"; }

# one tune: NAME DEVICES LIMIT_S [KILL_AFTER_N_TIMINGS]; stdout (the results, the busy lines) in NAME.log,
# stderr (Ray, the progress bars) in NAME.err, wall time and exit status in NAME/wall.txt, the cache
# copied to NAME/cache.jsonl
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
  CUDA_VISIBLE_DEVICES=$devs TRITON_CACHE_DIR="$work/triton-cache" timeout -k 20 "$limit" \
    python3 -m specgen tune $specs --target triton:sm90 --shapes "$shapes" "${knob_args[@]}" --rounds "$rounds" \
    --workers "$workers" --ray --cache "$work/cache.jsonl" > "$out/$name.log" 2> "$out/$name.err" &
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
  grep -E '^(Ray cluster|GPU |gemm|bmm|triton:sm90)' "$out/$name.log"
  [ "$rc" -eq 0 ] || tail -20 "$out/$name.err"
  return "$rc"
}

a=0 b=0 c=0
if [ -z "${COMPARE_ONLY:-}" ]; then
  run_tune A "$devices_a" $(( $(left) * 45 / 100 ))
  a=$?
  run_tune B "$devices_b" $(( ($(left) - 20) / 2 ))
  b=$?
  expected=$(count_timings "$out/A/cache.jsonl")
  kill_after=$(awk -v n="$expected" -v f="$kill_at" 'BEGIN { k = int(n * f + 0.5); print (k < 1 ? 1 : k) }')
  run_tune C "$devices_b" $(( $(left) - 20 )) "$kill_after"
  c=$?
  ray_gone
fi

# the comparison: winners chosen from each run's cache by the tuner's own selection (`tune` with no
# measurer: what --from-cache does), each pick's interval vs the incumbent from the same cache
python3 - "$out" "$specs" "$shapes" "$knobs" "$rounds" "$devices_a" "$devices_b" << 'EOF' 2>&1 | tee "$out/compare.log"
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

out, specs, shapes, knobs, rounds, dev_a, dev_b = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3], sys.argv[4].split(), sys.argv[5], sys.argv[6], sys.argv[7]
target = parse_target("triton:sm90")
catalogue = {ls.name: ls for f in sorted(Path("specs").glob("*.toml")) for ls in load_file(f)}
BUSY = re.compile(r"^GPU (\S+) \(pid (\S+)\): (\d+) jobs, busy ([\d.]+) s of ([\d.]+) s wall \((\d+)%\)(.*)$", re.M)


def short(c: dict) -> str:
    return (f"{c['tile.m']}x{c['tile.n']}x{c['tile.k']}, {c['triton.num_warps']} warps, stages {c['pipeline.ab_stages']}"
            if {"tile.m", "tile.n", "tile.k", "triton.num_warps", "pipeline.ab_stages"} <= set(c) else json.dumps(c))


def interval(cache: Cache, sem: str, shps: list, config: dict) -> tuple[float, float, float] | None:
    """Geomean over the slot's shapes of (ratio, ratio_lo, ratio_hi) vs the incumbent, paired per round."""
    es = [e for e in cache.entries.values() if e.kind == "time" and e.semantics == sem and e.target == str(target)
          and e.config == config and e.shape is not None and e.shape in shps and not e.error]
    if len(es) != len(shps):
        return None
    return geomean(e.ratio for e in es), geomean(e.ratio_lo for e in es), geomean(e.ratio_hi for e in es)


runs: dict[str, dict] = {}
for name, devs in (("A", dev_a), ("B", dev_b), ("C", dev_b)):
    d = out / name
    r: dict = {"devices": devs, "ran": (d / "wall.txt").exists()}
    runs[name] = r
    if not r["ran"]:
        continue
    wall, rc = (d / "wall.txt").read_text().split()
    log = (out / f"{name}.log").read_text()
    r.update(wall_s=float(wall), rc=int(rc))
    m = re.search(r"^Ray cluster: (\d+) CPUs .*?, (\d+) GPUs", log, re.M)
    r["ray_cpus"], r["ray_gpus"] = (int(m[1]), int(m[2])) if m else (None, None)
    r["busy"] = [{"gpu": g, "pid": p, "jobs": int(j), "busy_s": float(b), "wall_s": float(w), "pct": int(pc),
                  "restarted": "restarted" in rest} for g, p, j, b, w, pc, rest in BUSY.findall(log)]
    r["timing_wall_s"] = r["busy"][0]["wall_s"] if r["busy"] else None
    cache = Cache(d / "cache.jsonl")
    times = [e for e in cache.entries.values() if e.kind == "time"]
    r["timings"], r["failed_timings"] = len(times), sum(bool(e.error) for e in times)
    r["candidates"] = len({(e.semantics, e.config_key) for e in times if not e.error})
    r["keys"] = {e.key: bool(e.error) for e in times}
    r["picks"] = {}
    for spec in specs:
        loaded = catalogue[spec]
        try:
            rep = tune(loaded, [target], parse_shapes(shapes), cache=cache, machine=None, compiler=None, measurer=None,
                       overrides=parse_knobs(knobs))
        except TuneError as e:
            r["picks"][spec] = {"error": str(e)}
            continue
        sem = semantics(loaded.spec)
        for s in rep.slots:
            pick = s.winner or s.incumbent
            r["picks"][f"{spec} {s.label}"] = {
                "config": pick, "kept_incumbent": s.winner is None, "timed": s.timed, "shapes": [tuple(x) for x in s.shapes],
                "sem": sem, "aa": interval(cache, sem, [tuple(x) for x in s.shapes], s.incumbent),
                "score": interval(cache, sem, [tuple(x) for x in s.shapes], pick)}
    r["cache"] = cache


def agree(x: str, y: str, slot: str) -> str:
    px, py = runs[x]["picks"].get(slot), runs[y]["picks"].get(slot)
    if not px or not py or "error" in px or "error" in py:
        return "n/a"
    if px["config"] == py["config"]:
        return "same pick"
    notes, ok = [], True
    for run in (x, y):  # in each run's cache: do the two picks' intervals vs the incumbent overlap?
        c = runs[run]["cache"]
        ix, iy = (interval(c, px["sem"], px["shapes"], p["config"]) for p in (px, py))
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


A, B, C = runs["A"], runs["B"], runs["C"]
md = ["# Issue 22: `specgen tune --ray` on one host's GPUs", "",
      "```", (out / "machine.txt").read_text().strip(), "```", "",
      f"Space: {', '.join(specs)} on triton:sm90, shapes {shapes}, knobs {' '.join(knobs)}, {rounds} paired rounds "
      "per timing; each run one `specgen tune --ray` for all kernels with a fresh cache, module folder and "
      "Triton cache. Timing phase: from the first timing job sent to the last result (the GPUs' share; the "
      "wall time adds Python and Ray start-up, the compiles and the actors' start).", "",
      "| run | GPUs (Ray's count) | compile workers (Ray CPUs) | candidates timed | timings (failed) | wall s | "
      "timing phase s | wall vs A | timing phase vs A | per-GPU busy (driver-counted) | exit |",
      "|---|---|---|---|---|---|---|---|---|---|---|"]
for name, r in runs.items():
    if not r["ran"]:
        md.append(f"| {name} | not run | | | | | | | | | |")
        continue
    vs = f"{r['wall_s'] / A['wall_s']:.2f}" if A.get("wall_s") else "-"
    tvs = (f"{r['timing_wall_s'] / A['timing_wall_s']:.2f}" if A.get("timing_wall_s") and r["timing_wall_s"] else "-")
    busy = "; ".join(f"GPU {b['gpu']}: {b['jobs']} jobs, {b['busy_s']:.1f} s ({b['pct']}%)"
                     + (", restarted" if b["restarted"] else "") for b in r["busy"]) or "-"
    label = {"A": "A (one GPU)", "B": "B (two GPUs)", "C": "C (two GPUs, actor killed)"}[name]
    md.append(f"| {label} | {len(r['devices'].split(','))} ({r['ray_gpus']}) | {r['ray_cpus']} | {r['candidates']} | "
              f"{r['timings']} ({r['failed_timings']}) | {r['wall_s']:.1f} | "
              f"{r['timing_wall_s'] if r['timing_wall_s'] is not None else '-'} | {vs} | {tvs} | {busy} | {r['rc']} |")
md += ["", "| kernel, slot | A | B | C | A/A spread in A (incumbent vs itself) | B vs A | C vs A |", "|---|---|---|---|---|---|---|"]
for slot in A.get("picks", {}):
    aa = A["picks"][slot].get("aa")
    md.append(f"| {slot} | {fmt_pick(A['picks'].get(slot))} | {fmt_pick(B.get('picks', {}).get(slot))} | "
              f"{fmt_pick(C.get('picks', {}).get(slot))} | {f'[{aa[1]:.4f}, {aa[2]:.4f}]' if aa else '-'} | "
              f"{agree('A', 'B', slot) if B['ran'] else '-'} | {agree('A', 'C', slot) if C['ran'] else '-'} |")

verdict = {}
if A.get("wall_s") and B.get("wall_s") and not A["rc"] and not B["rc"]:
    verdict["wall_ratio"] = B["wall_s"] / A["wall_s"]
    md += ["", f"- 2 GPUs vs 1, wall time: {verdict['wall_ratio']:.2f}x (issue 22: <= 0.6x): "
           f"{'met' if verdict['wall_ratio'] <= 0.6 else 'NOT met'}"
           + (f"; timing phase {B['timing_wall_s'] / A['timing_wall_s']:.2f}x" if A["timing_wall_s"] and B["timing_wall_s"] else "")]
for name in ("A", "B", "C"):
    r = runs[name]
    if r["ran"] and r["ray_gpus"] is not None and r["ray_gpus"] != len(r["devices"].split(",")):
        md.append(f"- run {name}: Ray counted {r['ray_gpus']} GPUs for CUDA_VISIBLE_DEVICES={r['devices']}")
if C["ran"]:
    killed = (out / "C" / "killed.txt").read_text().strip() if (out / "C" / "killed.txt").exists() else ""
    done_a = {k for k, err in A.get("keys", {}).items() if not err}
    missing = sorted(done_a - {k for k, err in C["keys"].items() if not err})
    restarted = [b for b in C["busy"] if b["restarted"]]
    ok = bool(killed) and C["rc"] == 0 and not missing and C["timings"] >= A.get("timings", 0)
    verdict["kill_ok"] = ok
    md += [f"- killed actor (run C): {killed or 'NO ACTOR WAS KILLED (none found by pgrep, or the run ended first)'}; "
           f"the tune exited {C['rc']}, {C['timings']} timings cached ({C['failed_timings']} failed) against A's "
           f"{A.get('timings', '?')}; {len(missing)} of A's finished timings missing in C; "
           f"{'restarted: ' + ', '.join('GPU ' + b['gpu'] + ' (new pid ' + b['pid'] + ')' for b in restarted) if restarted else 'no restart seen in the busy lines'}"
           f": {'OK' if ok else 'NOT OK'}"]
text = "\n".join(md) + "\n"
(out / "multi.md").write_text(text)
for r in runs.values():
    r.pop("cache", None)
    r.pop("keys", None)
(out / "multi.json").write_text(json.dumps({"runs": runs, "verdict": verdict}, indent=1, default=str))
print(text)
EOF
cmp=${PIPESTATUS[0]}
echo "total $(( $(date +%s) - start )) s; runs A $a, B $b, C $c; comparison $cmp; $out/multi.md"
exit $(( a || b || c || cmp ))
