#!/usr/bin/env bash
# The demo behind `make demo`: a local cluster (controller + 2 workers x 4 CPU devices), the unified
# device list and status, the seeds' pmap + psum program and a psum over real inputs across both
# workers (`loom run`), then a clean stop that leaves no process behind.
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then  # the comment above is the help
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -euo pipefail
build=${1:-build}
loom="$build/bin/loom"
state=$(mktemp -d)
export LOOM_STATE_DIR="$state"   # keep the demo's cluster apart from any other local cluster
cleanup() { "$loom" down >/dev/null 2>&1 || true; rm -rf "$state"; }
trap cleanup EXIT

echo "== loom up --detach --workers 2 --devices-per-worker 4"
"$loom" up --detach --workers 2 --devices-per-worker 4
echo; echo "== loom devices"
"$loom" devices
echo; echo "== loom status"
"$loom" status
src=$(cd "$(dirname "$0")/.." && pwd)
echo; echo "== loom run examples/distributed_sum.mlir      (jax.pmap(lambda v: lax.psum(1, 'devices'))(jnp.arange(8)))"
"$loom" run "$src/examples/distributed_sum.mlir"
echo; echo "== loom run examples/distributed_psum.mlir --input 0=examples/arange8.npy      (psum(v * v) across both workers)"
"$loom" run "$src/examples/distributed_psum.mlir" --input "0=$src/examples/arange8.npy"
echo; echo "== python examples/tpu_workload.py      (the how-to's JAX program, run on the cluster by loom.jax)"
"${PYTHON:-python3}" "$src/examples/tpu_workload.py"
echo; echo "== loom down"
"$loom" down
trap - EXIT
rm -rf "$state"
