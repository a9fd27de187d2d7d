#!/usr/bin/env bash
# The one command to run on the H200 (repository root, $OUT set by the device tool):
#
#   bash tools/gpu_check.sh          # GPU tests, then the benchmark
#   bash tools/gpu_check.sh tune     # tools/tune.py --write-specs first, then tests + benchmark
#   bash tools/gpu_check.sh tune-only   # only the tuner, every section (since session 3 it
#                                       # may not fit one 10-minute device call: use the halves)
#   bash tools/gpu_check.sh tune-router # only the router tables (keeps the decode tables)
#   bash tools/gpu_check.sh tune-decode # only the scorer + selector tables (keeps the router's)
#   bash tools/gpu_check.sh bench-only  # only the benchmark
#   bash tools/gpu_check.sh verify      # GPU tests + quick bench (the first call of a session)
#
# The GPU tests run in GPU_TEST_JOBS (default 8) pytest-xdist processes sharing the GPU: they
# are compile-bound and check results only (no timing).
#
# Logs and results land in $OUT: gpu_tests.log, tune.log + tune.json + tuned_<target>.py
# (+ tuned.py, the list of measured targets, when the device is a new target: copy both),
# bench.log + bench.json + bench.png, env.txt. A short summary is printed last.
# Note: after `tune`, the benchmark still measures the dispatch tables in generated/ (regenerate
# runs on the CPU machine), i.e. the tables from before this tune.
set -u -o pipefail
export PYTHONUNBUFFERED=1
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
MODE=${1:-all}
PY=${PYTHON:-python3}
case "$MODE" in all|tune|tune-only|tune-router|tune-decode|bench-only|verify) ;;
  *) echo "usage: $0 [tune|tune-only|tune-router|tune-decode|bench-only|verify]"; exit 2;; esac

start=$(date +%s)
tests_rc=- ; bench_rc=- ; tune_rc=-

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1
  $PY -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1
} > "$OUT/env.txt"
cat "$OUT/env.txt"

if [ "$MODE" = tune ] || [ "$MODE" = tune-only ] || [ "$MODE" = tune-router ] || \
   [ "$MODE" = tune-decode ]; then
  sections=router,scorer,selector
  [ "$MODE" = tune-router ] && sections=router
  [ "$MODE" = tune-decode ] && sections=scorer,selector
  echo "== tune $sections ($(date -u +%T))"
  $PY tools/tune.py --write-specs --sections "$sections" --out "$OUT" 2>&1 | tee "$OUT/tune.log"
  tune_rc=$?
fi

if [ "$MODE" = all ] || [ "$MODE" = tune ] || [ "$MODE" = verify ]; then
  echo "== GPU tests ($(date -u +%T))"
  jobs=()
  if $PY -c 'import xdist' 2>/dev/null && [ "${GPU_TEST_JOBS:-8}" -gt 1 ]; then
    jobs=(-n "${GPU_TEST_JOBS:-8}")
  fi
  $PY -m pytest -q -m gpu tests "${jobs[@]}" 2>&1 | tee "$OUT/gpu_tests.log"
  tests_rc=$?
fi

if [ "$MODE" = all ] || [ "$MODE" = tune ] || [ "$MODE" = bench-only ] || [ "$MODE" = verify ]; then
  echo "== benchmark ($(date -u +%T))"
  if [ "$MODE" = verify ]; then
    $PY tools/bench.py --quick --out "$OUT" 2>&1 | tee "$OUT/bench.log"
  else
    $PY tools/bench.py --out "$OUT" 2>&1 | tee "$OUT/bench.log"
  fi
  bench_rc=$?
fi

echo
echo "================ gpu_check summary ($MODE, $(( $(date +%s) - start )) s) ================"
tail -n +2 "$OUT/env.txt"
if [ "$tune_rc" != - ]; then
  echo "tune: rc=$tune_rc; $(grep -E '^table:' "$OUT/tune.log" | tail -1)"
  grep -E '^new target ' "$OUT/tune.log" | tail -1
fi
if [ "$tests_rc" != - ]; then
  echo "gpu tests: rc=$tests_rc; $(grep -E '(passed|failed|error|skipped|no tests ran)' "$OUT/gpu_tests.log" | tail -1)"
  grep -E '^(FAILED|ERROR) ' "$OUT/gpu_tests.log" | head -5
fi
if [ "$bench_rc" != - ]; then
  echo "bench: rc=$bench_rc"
  grep -E '^  decode .*(PASS|FAIL)|^  router \(|^  ERROR|^TARGETS:' "$OUT/bench.log"
fi
echo "files: $(cd "$OUT" && ls | tr '\n' ' ')"
rc=0
for r in "$tune_rc" "$tests_rc" "$bench_rc"; do
  if [ "$r" != - ] && [ "$r" != 0 ]; then rc=1; fi
done
exit $rc
