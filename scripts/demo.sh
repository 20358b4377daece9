#!/usr/bin/env bash
# The demo behind `make demo`: a local cluster (controller + 2 workers x 4 CPU devices), the unified
# device list and status, then a clean stop that leaves no process behind.
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
echo; echo "== python examples/tpu_workload.py   (the how-to's JAX program, run on the cluster)"
"${PYTHON:-python3}" examples/tpu_workload.py
echo; echo "== loom down"
"$loom" down
trap - EXIT
rm -rf "$state"
