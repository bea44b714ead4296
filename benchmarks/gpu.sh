#!/usr/bin/env bash
# The GPU run: every benchmark that has a GPU side, in one command, on a machine with an NVIDIA
# GPU and a CUDA-enabled JAX already installed (nothing is installed here: such machines often
# reach no package index). Run from the repository root:
#
#     OUT=/some/folder bash benchmarks/gpu.sh
#
# It writes into $OUT (default benchmarks/gpu-run): results-gpu.json and benchmarks-gpu.md
# (fidelity, worker overhead, named against array at N = 10 and 100: run_benchmarks.py --backend
# gpu --quick --sizes 10,100; on an H200 the dict program's gradient at N = 300 alone outlasted a
# four-minute limit),
# bench_pack-gpu.json (pack), bench_jit-gpu.json (explorer.jit), gpu.txt (what nvidia-smi names)
# and log.txt. Each step has its own time limit, so one slow step cannot cost the others.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/gpu-run}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
# The measuring worker is a child process: it must find this checkout's explorer too.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$PY" -c 'import jax, jaxlib, equinox; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "equinox", equinox.__version__); print(jax.devices())'
} > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
step() {  # step SECONDS NAME COMMAND...
  local limit=$1 name=$2; shift 2
  echo "== $name (limit ${limit}s)"
  local t0=$SECONDS
  timeout "$limit" "$@"
  echo "== $name: exit $? after $((SECONDS - t0)) s"
}
{
  step "${LIMIT_MAIN:-260}" "run_benchmarks a,b,c" "$PY" benchmarks/run_benchmarks.py --backend "${BACKEND:-gpu}" \
    --quick --rounds "${ROUNDS:-3}" --sizes 10,100 --only a,b,c --out "$OUT/results-gpu.json" --doc "$OUT/benchmarks-gpu.md" \
    --note "GPU run by benchmarks/gpu.sh"
  step "${LIMIT_PACK:-90}" "bench_pack" "$PY" benchmarks/bench_pack.py --out "$OUT/bench_pack-gpu.json"
  step "${LIMIT_JIT:-150}" "bench_jit" "$PY" benchmarks/bench_jit.py --sizes 10,100 --rounds 2 \
    --out "$OUT/bench_jit-gpu.json"
} 2>&1 | tee "$OUT/log.txt"
