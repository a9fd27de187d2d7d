#!/usr/bin/env bash
# The one command to run on the H200 (repository root; results under $OUT, default out/):
#
#   bash tools/gpu_check.sh             # GPU tests, then the benchmark
#   bash tools/gpu_check.sh verify      # GPU tests + quick bench (the first call of a session)
#   bash tools/gpu_check.sh bench-only  # only the benchmark
#   bash tools/gpu_check.sh prefill [--study]  # prefill GPU tests + tools/bench_prefill.py
#   bash tools/gpu_check.sh attn [--quick] [--study]  # sparse-attention GPU tests + bench_attn.py
#   bash tools/gpu_check.sh tune router [measure options]   # measure one section (one run file;
#   bash tools/gpu_check.sh tune decode [measure options]   #   repeat on a second machine)
#   bash tools/gpu_check.sh tune prefill [measure options]
#   bash tools/gpu_check.sh tune attention [measure options]
#   bash tools/gpu_check.sh memcheck [test files or pytest options]
#
# `memcheck` runs the tests CI runs on the interpreter (small shapes, every edge case: holes,
# ids past the table, pages outside the cache, garbage lengths, strided views) on the GPU under
# compute-sanitizer's memcheck (after a plain run that compiles the kernels), each tensor its
# own allocation (PyTorch's caching allocator off), so a kernel's read or write past the end of
# a tensor is reported (memcheck_*.log; a tensor's bulk copies by the tensor memory
# accelerator are bounded by their descriptor and not seen). Default files: the kernels'
# tests; `-k EXPR` or files narrow it.
# `tune SECTION` writes $OUT/tune_<section>.json and its log; with --inputs,
# tune_decode_<inputs>.json (choose each inputs' runs in their own call); with attention
# filters, e.g. tune_attention_kv_dtypes_fp8e4m3_query_lens_1.json. The measurement stops
# timing after TUNE_BUDGET_S seconds (default 400; the compile warm-up comes on top); split
# decode by context when it does not fit (`tune decode --contexts 131072`). Fetch the files, do
# the same on a second machine, then on the CPU: python3 -m tools.tune choose DIR/*.json
# --write; codegen regenerate.
#
# The GPU tests run in GPU_TEST_JOBS (default 8) pytest-xdist processes sharing the GPU: they
# are compile-bound and check results only (no timing); 0 runs one process without xdist
# (memcheck's sanitized run: one process unless GPU_TEST_JOBS is set). Logs and results land in $OUT:
# gpu_tests.log (memcheck: also gpu_tests_plain.log, memcheck_*.log), bench.log + bench.json
# + bench.png, tune_*.json/log, env.txt.
# A short summary is printed last.
set -u -o pipefail
export PYTHONUNBUFFERED=1
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
MODE=${1:-all}
PY=${PYTHON:-python3}
case "$MODE" in all|tune|bench-only|verify|prefill|attn|memcheck) ;;
  *) echo "usage: $0 [verify|bench-only|prefill|attn|memcheck|tune router|tune decode|tune prefill|tune attention]"
     exit 2;; esac
SECTION=
if [ "$MODE" = tune ]; then
  SECTION=${2:-}
  case "$SECTION" in router|decode|prefill|attention) ;;
    *) echo "usage: $0 tune router|decode|prefill|attention [python3 -m tools.tune measure options]"
       exit 2;; esac
  shift 2
else
  shift $(( $# > 0 ? 1 : 0 ))
fi

start=$(date +%s)
tests_rc=- ; bench_rc=- ; tune_rc=-

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1
  $PY -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1
} > "$OUT/env.txt"
cat "$OUT/env.txt"

if [ "$MODE" = tune ]; then
  tune_rc=0
  # runs of other decode inputs get their own names (`choose` takes one inputs' runs at a
  # time), and so do runs narrowed by attention filters (two tunes in one call keep both files)
  name=$SECTION
  args=("$@")
  for i in "${!args[@]}"; do
    value=$(printf '%s' "${args[$((i + 1))]:-}" | tr -c 'A-Za-z0-9_' '_')
    case "${args[$i]}" in
      --inputs) name="${name}_${value}" ;;
      --modes|--kv-dtypes|--query-lens|--groups|--programs)
        name="${name}_$(printf '%s' "${args[$i]#--}" | tr - _)_${value}" ;;
    esac
  done
  echo "== tune $SECTION ($(date -u +%T))"
  $PY -m tools.tune measure --sections "$SECTION" --budget-s "${TUNE_BUDGET_S:-400}" \
      --out "$OUT/tune_${name}.json" "$@" 2>&1 | tee "$OUT/tune_${name}.log"
  tune_rc=$?
fi

if [ "$MODE" = prefill ]; then
  echo "== prefill GPU tests ($(date -u +%T))"
  $PY -m pytest -q -m gpu tests/test_index_prefill.py 2>&1 | tee "$OUT/gpu_tests.log"
  tests_rc=$?
  echo "== prefill benchmark ($(date -u +%T))"
  $PY tools/bench_prefill.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench_prefill.log"
  bench_rc=$?
fi

if [ "$MODE" = attn ]; then
  echo "== sparse-attention GPU tests ($(date -u +%T))"
  $PY -m pytest -q -m gpu tests/test_sparse_attn.py 2>&1 | tee "$OUT/gpu_tests.log"
  tests_rc=$?
  echo "== sparse-attention benchmark ($(date -u +%T))"
  $PY tools/bench_attn.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench_attn.log"
  bench_rc=$?
fi

if [ "$MODE" = memcheck ]; then
  echo "== tests under compute-sanitizer memcheck ($(date -u +%T))"
  args=("$@")
  if [ ${#args[@]} -eq 0 ] || [ "${args[0]#-}" != "${args[0]}" ]; then
    args=(tests/test_sparse_attn*.py tests/test_robustness.py tests/test_index_*.py
          tests/test_router_gemm.py tests/test_dropin.py "${args[@]}")
  fi
  rm -f "$OUT"/memcheck_*.log
  # The sanitized run is one pytest process unless GPU_TEST_JOBS names xdist workers: on
  # 2026-12-06 two H100s' sanitized xdist runs did no test in 210-460 s, even 22 tests on 8
  # workers, where one process per file ran 1105 tests in ~160 s (GPU-030d8ce9).
  jobs=(-n "${GPU_TEST_JOBS:-0}")
  [ "${GPU_TEST_JOBS:-0}" = 0 ] && jobs=()
  # Kernels compiled under the sanitizer made nine test files stall (no test done in 540 s);
  # with Triton's cache filled by a plain run first (the tests' plain GPU run) seven of them
  # (628 tests) took 5 min under it. The plain run always has 8 workers: it only compiles.
  $PY -m pytest -q -m "not gpu" -p no:cacheprovider -n 8 "${args[@]}" \
      > "$OUT/gpu_tests_plain.log" 2>&1
  plain_rc=$?
  echo "plain run: rc=$plain_rc $(tail -1 "$OUT/gpu_tests_plain.log")"
  # xdist workers are children: --target-processes all checks them; one log per process.
  # Only accesses count (torch's own probing calls return API errors it expects).
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --target-processes all \
      --report-api-errors no --print-limit 20 --log-file "$OUT/memcheck_%p.log" \
      $PY -m pytest -q -m "not gpu" -p no:cacheprovider "${jobs[@]}" "${args[@]}" \
      2>&1 | tee "$OUT/gpu_tests.log"
  tests_rc=$?
  [ "$plain_rc" != 0 ] && [ "$tests_rc" = 0 ] && tests_rc=$plain_rc
  errors=$(grep -ho "ERROR SUMMARY: [0-9]*" "$OUT"/memcheck_*.log 2>/dev/null | awk '{s += $3} END {print s + 0}')
  # (the checked children's reports go to the first process's log)
  echo "memcheck: $errors errors in $(ls "$OUT"/memcheck_*.log 2>/dev/null | wc -l) log(s)"
  if [ "$errors" != 0 ]; then
    grep -h -A6 -E "^========= (Invalid|Program hit)" "$OUT"/memcheck_*.log | head -60
    [ "$tests_rc" = 0 ] && tests_rc=1
  fi
fi

if [ "$MODE" = all ] || [ "$MODE" = verify ]; then
  echo "== GPU tests ($(date -u +%T))"
  jobs=()
  if $PY -c 'import xdist' 2>/dev/null && [ "${GPU_TEST_JOBS:-8}" -gt 1 ]; then
    jobs=(-n "${GPU_TEST_JOBS:-8}")
  fi
  $PY -m pytest -q -m gpu tests "${jobs[@]}" 2>&1 | tee "$OUT/gpu_tests.log"
  tests_rc=$?
fi

if [ "$MODE" = all ] || [ "$MODE" = bench-only ] || [ "$MODE" = verify ]; then
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
  echo "$MODE: rc=$tune_rc"
  grep -hE '^(tune:|run file:)' "$OUT"/tune_*.log 2>/dev/null
fi
if [ "$tests_rc" != - ]; then
  echo "gpu tests: rc=$tests_rc; $(grep -E '(passed|failed|error|skipped|no tests ran)' "$OUT/gpu_tests.log" | tail -1)"
  grep -E '^(FAILED|ERROR) ' "$OUT/gpu_tests.log" | head -5
fi
if [ "$bench_rc" != - ]; then
  echo "bench: rc=$bench_rc"
  grep -hE '^  decode .*(PASS|FAIL)|^  router \(|^  ERROR|^TARGETS:|^prefill:|^attention:' \
      "$OUT"/bench.log "$OUT"/bench_prefill.log "$OUT"/bench_attn.log 2>/dev/null
fi
echo "files: $(cd "$OUT" && ls | tr '\n' ' ')"
rc=0
for r in "$tune_rc" "$tests_rc" "$bench_rc"; do
  if [ "$r" != - ] && [ "$r" != 0 ]; then rc=1; fi
done
exit $rc
