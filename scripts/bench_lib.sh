# The benchmark command's two parts (sourced by scripts/bench.sh; tests/python/test_bench_script.py runs them with a
# stand-in CLI): the arguments of `fp4gemm bench` when the user gives some, and the main job's four suites.

# bench_args ARG...: sets BENCH_ARGS to ARG... with `--suite all` put first where no suite is named, and `--json
# bench/results/latest.json` (suite all) or `latest_<suite>.json` added where no JSON file is named.
bench_args() {
  BENCH_ARGS=("$@")
  local suite="" json=0 i
  for ((i = 0; i < $#; i++)); do
    case "${BENCH_ARGS[i]}" in
      --suite) suite=${BENCH_ARGS[i + 1]:-} ;;
      --suite=*) suite=${BENCH_ARGS[i]#--suite=} ;;
      --json | --json=*) json=1 ;;
    esac
  done
  [ -n "$suite" ] || { suite=all; BENCH_ARGS=(--suite all "${BENCH_ARGS[@]}"); }
  [ $json = 1 ] || BENCH_ARGS+=(--json "bench/results/latest$([ "$suite" = all ] || echo "_$suite").json")
}

# bench_main_job CLI: the four suites, one JSON each under bench/results/; a suite that fails does not stop the others,
# and the function then returns 1, naming it.
bench_main_job() {
  local cli=$1 t0=$SECONDS failed=()
  bench_suite() {  # bench_suite <step> <what> <fp4gemm bench arguments...>
    local step=$1 what=$2; shift 2
    echo
    echo "[bench] $step/4 $what: fp4gemm bench $* [$((SECONDS - t0)) s so far]"
    "$cli" bench "$@" || { echo "[bench] $step/4 $what FAILED (exit $?)"; failed+=("$step/4 $what"); }
  }
  bench_suite 1 "seed and dense GEMM suites" --suite all --json bench/results/latest.json
  bench_suite 2 "dual GEMM suite" --suite dual --json bench/results/latest_dual.json
  bench_suite 3 "layer suite, W4A16" --suite layer --act bf16 --weight-layout pieces --values checkpoint \
    --json bench/results/latest_layer_w4a16.json
  bench_suite 4 "layer suite, W4A4 NVFP4" --suite layer --act nvfp4 --weight-layout pieces \
    --json bench/results/latest_layer_w4a4.json
  echo
  if [ ${#failed[@]} -gt 0 ]; then
    echo "[bench] done in $((SECONDS - t0)) s; FAILED: ${failed[*]} (the other suites' JSON files are written)"
    return 1
  fi
  echo "[bench] done in $((SECONDS - t0)) s: bench/results/latest.json, latest_dual.json, latest_layer_w4a16.json," \
    "latest_layer_w4a4.json"
}
