#!/usr/bin/env bash
# Installs what Loom needs to build, test and run, and nothing that is already there.
# Safe to run any number of times (make demo and make test call it first).
#   scripts/setup.sh            system packages + Python packages
#   LOOM_SETUP_SKIP=1           skip everything (an offline machine that already has it all)
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then  # the comment above is the help
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -euo pipefail
[[ "${LOOM_SETUP_SKIP:-0}" == 1 ]] && exit 0

APT_PACKAGES=(
  build-essential cmake pkg-config
  libopenblas-dev                         # BLAS for dot_general / convolution
  libprotobuf-c-dev protobuf-c-compiler   # wire schema
  libuv1-dev                              # control-plane event loops
  libucx-dev ucx-utils                    # data plane
  libcjson-dev                            # JSON output
  zlib1g-dev                              # CRC-32 of checkpoint file blocks
  libssl-dev                              # OpenSSL: worker and client authentication
  libnghttp2-dev                          # HTTP/2 for the IFRT proxy's gRPC server
  libmicrohttpd-dev                       # the controller's HTTP port (/metrics, /healthz, /readyz)
  libcurl4-openssl-dev                    # `loom trace`'s HTTP client
  libsqlite3-dev                          # the controller's journal (--state DIR)
  libcmocka-dev                           # C unit tests
  openmpi-bin libopenmpi-dev              # the MPI peer in bench/ (all_reduce comparison)
  procps psmisc                           # pgrep/pkill/fuser used by tests
  iproute2                                # `ip netns`: the multi-host tests' network namespaces
)
# The Slurm test (tests/integration/test_slurm.py) starts its own munged + slurmctld + slurmd;
# about 40 s to install once. LOOM_SETUP_SLURM=0 leaves them out (that test then skips).
[[ "${LOOM_SETUP_SLURM:-1}" == 0 ]] || APT_PACKAGES+=(
  slurmctld slurmd slurm-client munge
)
# The dashboard test (tests/integration/test_dashboard.py) drives a headless Chromium; about 1 min
# to install once. LOOM_SETUP_BROWSER=0 leaves it out (that test then skips).
[[ "${LOOM_SETUP_BROWSER:-1}" == 0 ]] || APT_PACKAGES+=(
  chromium chromium-driver
)
# The scrape test (tests/integration/test_deploy.py) runs a real Prometheus against a controller
# with deploy/prometheus's bearer-token scrape job. LOOM_SETUP_PROMETHEUS=0 leaves it out (it skips).
[[ "${LOOM_SETUP_PROMETHEUS:-1}" == 0 ]] || APT_PACKAGES+=(
  prometheus
)
# name or name==version (pip's distribution names): tests compare with JAX's numbers, read what
# jaxlib writes and speak the IFRT proxy protocol of jaxlib 0.10.2, so jax/jaxlib and pathwaysutils
# are pinned; grpcio lets the proxy tests talk gRPC to it directly; xla-cpu-pjrt is XLA:CPU as a
# PJRT plugin (loom interpret --backend pjrt; its header is read at build time); prometheus_client's
# parser reads the controller's /metrics in the tests; kubernetes-validate checks deploy/k8s against
# Kubernetes' schemas; safetensors (its own reader) checks the checkpoint files Loom writes
PY_PACKAGES=(numpy pytest jax==0.10.2 jaxlib==0.10.2 pathwaysutils==0.1.13 grpcio xla-cpu-pjrt==0.0.1 prometheus_client
             kubernetes-validate pyyaml selenium safetensors==0.8.0)

sudo_() { if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  echo "setup: need root to run: $*" >&2; return 1; fi; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_ apt-get update -q >/dev/null
  sudo_ apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
pymissing=()
for p in "${PY_PACKAGES[@]}"; do
  name=${p%%==*} want=${p#*==}
  [[ $p == *==* ]] || want=
  have=$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null) || have=
  if [[ -z $have || ( -n $want && $have != "$want" ) ]]; then pymissing+=("$p"); fi
done
if ((${#pymissing[@]})); then
  echo "setup: pip installing ${pymissing[*]}"
  "$PY" -m pip install -q --disable-pip-version-check "${pymissing[@]}"
fi
echo "setup: all dependencies present"
