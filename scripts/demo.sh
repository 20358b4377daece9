#!/usr/bin/env bash
# The demo behind `make demo`: a local cluster (controller + 2 workers x 4 CPU devices), the unified
# device list and status, the seeds' pmap + psum program and a psum over real inputs across both
# workers (`loom run`), the seed how-to's JAX program through loom.jax and, unchanged with
# pathwaysutils, through the IFRT proxy `loom up` starts (JAX_PLATFORMS=proxy), then a clean stop
# that leaves no process behind.
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

# the IFRT proxy's port: 29000 unless that is taken (a shared machine), then any free one
proxy_port=$("${PYTHON:-python3}" -c 'import socket
s = socket.socket()
try:
    s.bind(("127.0.0.1", 29000))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
echo "== loom up --detach --workers 2 --devices-per-worker 4 --proxy-port $proxy_port"
"$loom" up --detach --workers 2 --devices-per-worker 4 --proxy-port "$proxy_port"
echo; echo "== loom devices"
"$loom" devices
echo; echo "== loom status"
"$loom" status
src=$(cd "$(dirname "$0")/.." && pwd)
echo; echo "== loom run examples/distributed_sum.mlir      (jax.pmap(lambda v: lax.psum(1, 'devices'))(jnp.arange(8)))"
"$loom" run "$src/examples/distributed_sum.mlir"
echo; echo "== loom run examples/distributed_psum.mlir --input 0=examples/arange8.npy      (psum(v * v) across both workers)"
"$loom" run "$src/examples/distributed_psum.mlir" --input "0=$src/examples/arange8.npy"
echo; echo "== python examples/tpu_workload.py      (the how-to's JAX program; loom.jax.initialize() points JAX at the proxy)"
"${PYTHON:-python3}" "$src/examples/tpu_workload.py" 2> "$state/loom-jax-client.log" ||
  { cat "$state/loom-jax-client.log" >&2; exit 1; }
echo; echo "== JAX_PLATFORMS=proxy JAX_BACKEND_TARGET=grpc://127.0.0.1:$proxy_port python examples/proxy/tpu_workload.py      (the how-to unchanged: pathwaysutils, the IFRT proxy)"
JAX_PLATFORMS=proxy JAX_BACKEND_TARGET="grpc://127.0.0.1:$proxy_port" IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS=true \
  "${PYTHON:-python3}" "$src/examples/proxy/tpu_workload.py" 2> "$state/proxy-client.log" ||
  { cat "$state/proxy-client.log" >&2; exit 1; }
echo; echo "== loom down"
"$loom" down
trap - EXIT
rm -rf "$state"
