#!/usr/bin/env bash
# The sanitizer pass behind `make sanitize`.
#
# 1. Builds fastload._C with AddressSanitizer + UndefinedBehaviorSanitizer, CPU only,
#    into build-sanitize/ (objects in temp/, the module in lib/fastload/): the normal
#    build/ and fastload/_C*.so stay as they are. Incremental after the first build.
# 2. Checks that the module really is instrumented (it calls the sanitizer runtimes) and
#    that the test processes load it and not fastload/_C*.so.
# 3. Runs the fuzzers and the kernel tests against it with the runtimes preloaded. Any
#    sanitizer report (in this process, a forked DataLoader worker or a subprocess) fails
#    the run and is printed, as does a test failure, a crash or running past the time.
#
# Usage: scripts/sanitize.sh [pytest arguments]     (default: $DEFAULT_TESTS below)
#        scripts/sanitize.sh --run COMMAND [ARGS]   any command under the same set-up,
#                                                   e.g. `--run python repro.py`
# Environment:
#   PY                   Python with torch (default: .venv/bin/python)
#   SANITIZERS           the -fsanitize= list (default: address,undefined,float-cast-overflow)
#   FASTLOAD_FUZZ_CASES  cases per fuzzer (unset: each fuzzer's own default)
#   SANITIZE_TIMEOUT     seconds the test run may take (default 600; 0: no limit)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=build-sanitize
PY=${PY:-.venv/bin/python}
SANITIZERS=${SANITIZERS:-address,undefined,float-cast-overflow}
TIMEOUT=${SANITIZE_TIMEOUT:-600}
DEFAULT_TESTS="tests/fuzz tests/ops/test_decode_png.py tests/test_png_native.py tests/ops/test_crop_resize_flip_normalize.py tests/ops/test_interpolation.py tests/ops/test_transcode.py tests/ops/test_color.py tests/ops/test_blur.py tests/ops/test_autoaugment.py tests/test_color_fused.py tests/test_gaussian_blur.py tests/test_autoaugment_fused.py tests/test_random_crop.py tests/test_views.py tests/test_prepare.py tests/test_loader_stats.py tests/test_loader_errors.py::test_native_read_that_never_returns_honours_timeout_and_the_process_exits"
# Of tests/test_loader_errors.py only the engine's case (a native read that never returns):
# the rest runs torch's own worker processes, forked under the sanitizer runtimes, which
# now and then hang there (torch's machinery, not the engine's code).
# Not tests/test_exit.py: it ends threads with Python's pthread_exit at finalisation, and
# AddressSanitizer reports the forced unwind itself (a stack-buffer-overflow in
# __asan_handle_no_return's sigaltstack, flagged by ASan as a possible false positive for
# custom unwinding); the engine code those threads run is covered by the fuzzers here.

fail() {
  echo "[sanitize] FAILED: $*" >&2
  exit 1
}

PY_PATH=$(command -v "$PY") || fail "no Python at PY=$PY (run \`make setup\` or set PY)"
# ninja (a pip package) sits next to the venv's python; torch's build looks for it on PATH.
PY_BIN=$(cd "$(dirname "$PY_PATH")" && pwd)

mkdir -p "$OUT"
echo "[sanitize] building fastload._C with -fsanitize=$SANITIZERS into $OUT/ (log: $OUT/build.log)"
start=$(date +%s)
if ! PATH="$PY_BIN:$PATH" FASTLOAD_SANITIZE=$SANITIZERS FASTLOAD_CUDA=0 \
    flock "$OUT/.lock" "$PY_PATH" setup.py -q build_ext > "$OUT/build.log" 2>&1; then
  tail -n 60 "$OUT/build.log" >&2
  fail "the sanitizer build failed (full log: $OUT/build.log)"
fi
echo "[sanitize] build: $(( $(date +%s) - start )) s"

SUFFIX=$("$PY_PATH" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
MODULE="$ROOT/$OUT/lib/fastload/_C$SUFFIX"
[ -f "$MODULE" ] || fail "the build left no $MODULE"

# Static check: instrumented code calls the runtimes' report functions. A module built
# without the flags (or a stale normal build) has none.
symbols=$(nm -D --undefined-only "$MODULE") || fail "cannot read the symbols of $MODULE (nm)"
case ",$SANITIZERS," in *,address,*) grep -q "__asan_report_load" <<< "$symbols" \
  || fail "$MODULE has no AddressSanitizer checks (__asan_report_load*): not instrumented" ;; esac
case ",$SANITIZERS," in *,undefined,*) grep -q "__ubsan_handle_" <<< "$symbols" \
  || fail "$MODULE has no UBSan checks (__ubsan_handle_*): not instrumented" ;; esac

# The runtimes the module was linked against, preloaded: ASan must come first in the
# process (python itself is not instrumented), or it refuses to start.
PRELOAD=$(ldd "$MODULE" | awk '/lib(asan|ubsan)\.so/ {print $3}' | tr '\n' ' ')
[ -n "$PRELOAD" ] || fail "ldd finds no sanitizer runtime for $MODULE"

# Per run (concurrent runs do not mix): sanitizer reports, and the fuzz case each test
# process last started (tests/fuzz/conftest.py's fuzz_trace), to name the case of a crash.
RUN="$ROOT/$OUT/runs/$$"
REPORTS="$RUN/reports"
rm -rf "$RUN" && mkdir -p "$REPORTS" "$RUN/trace"
export FASTLOAD_FUZZ_TRACE="$RUN/trace"
# detect_leaks=0: CPython and torch keep allocations alive to exit by design.
# abort_on_error=1 / halt_on_error=1: the first report stops the process (non-zero).
# log_path: ASan reports go to files (pid appended), so one in a worker or subprocess, or
# one whose stderr a test captured, is still seen and fails the run.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:log_path=$REPORTS/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$REPORTS/ubsan${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export FASTLOAD_SANITIZED_C="$MODULE"
export PYTHONPATH="$ROOT/scripts/sanitize${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${FASTLOAD_FUZZ_CASES:-}" ]; then export FASTLOAD_FUZZ_CASES; else unset FASTLOAD_FUZZ_CASES; fi

show_reports() {
  local found=0
  for report in "$REPORTS"/*; do
    [ -f "$report" ] || continue
    found=1
    echo "======== $(basename "$report") ========" >&2
    cat "$report" >&2
  done
  # GCC's UBSan ignores log_path when ASan is loaded too: its reports are on stderr.
  if grep -q "runtime error:" "$RUN/output.log" 2>/dev/null; then
    found=1
    echo "======== UBSan (from the output) ========" >&2
    grep -A 16 "runtime error:" "$RUN/output.log" >&2
  fi
  if [ $found = 1 ]; then
    for trace in "$RUN/trace"/*; do
      [ -f "$trace" ] && echo "[sanitize] process $(basename "$trace") last started: $(cat "$trace")" >&2
    done
  fi
  return $found
}

# Runtime check: the sanitizer runtime is in the process and fastload._C is the module
# built above (sitecustomize.py redirects the import), compiled with the flags.
LD_PRELOAD="$PRELOAD" "$PY_PATH" - "$MODULE" "$SANITIZERS" <<'EOF' || { show_reports; fail "the self-check did not pass"; }
import ctypes, os, sys
from fastload import _ext
module, sanitizers = sys.argv[1], sys.argv[2]
loaded = _ext.require_ops()
if os.path.realpath(loaded.__file__) != os.path.realpath(module):
    sys.exit(f"fastload._C came from {loaded.__file__}, not the sanitizer build {module}")
flags = _ext.build_info().get("flags", "")
if f"-fsanitize={sanitizers}" not in flags:
    sys.exit(f"fastload._C's build flags lack -fsanitize={sanitizers}: {flags}")
ctypes.CDLL(None)["__asan_init"]  # raises when the ASan runtime is not loaded
print(f"[sanitize] self-check: fastload._C = {loaded.__file__} ({flags})")
EOF

start=$(date +%s)
if [ "${1:-}" = "--run" ]; then
  shift
  [ "${1:-}" = "python" ] && set -- "$PY_PATH" "${@:2}"
  echo "[sanitize] $* (limit ${TIMEOUT} s)"
  LD_PRELOAD="$PRELOAD" timeout --kill-after=10 "$TIMEOUT" "$@" 2>&1 | tee "$RUN/output.log"
  rc=${PIPESTATUS[0]}
else
  TESTS=("$@")
  [ ${#TESTS[@]} -gt 0 ] || read -r -a TESTS <<< "$DEFAULT_TESTS"
  echo "[sanitize] pytest ${TESTS[*]} (FASTLOAD_FUZZ_CASES=${FASTLOAD_FUZZ_CASES:-default}, limit ${TIMEOUT} s)"
  # faulthandler dumps every thread's stack shortly before the limit: a hang shows where.
  # --capture=sys: pytest captures Python's output only, so what the sanitizers write to
  # file descriptor 2 reaches the log even when they abort the process.
  dump_after=$(( TIMEOUT > 20 ? TIMEOUT - 10 : 0 ))
  LD_PRELOAD="$PRELOAD" timeout --kill-after=10 "$TIMEOUT" "$PY_PATH" -m pytest -q -p no:cacheprovider \
    --capture=sys -o faulthandler_timeout="$dump_after" --durations=5 "${TESTS[@]}" 2>&1 | tee "$RUN/output.log"
  rc=${PIPESTATUS[0]}
fi
elapsed=$(( $(date +%s) - start ))
if ! show_reports; then
  fail "sanitizer report(s) above (exit status $rc after ${elapsed} s; kept in $REPORTS)"
fi
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
  fail "the tests ran past SANITIZE_TIMEOUT=$TIMEOUT s (a hang, or a long run that needs a larger limit)"
fi
[ $rc -eq 0 ] || fail "exit status $rc after ${elapsed} s"
rm -rf "$RUN"
echo "[sanitize] clean: no sanitizer reports, passed in ${elapsed} s"
