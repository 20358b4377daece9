#!/usr/bin/env bash
# Installs the Python package (python/) over the freshly built libloom: `scripts/install-python.sh
# [BUILD_DIR]` (make python, make demo and make test run it). The package bundles that build's
# libloom.so.0, so it runs without LD_LIBRARY_PATH. Builds without isolation when setuptools is
# already installed (no network needed), else lets pip fetch it.
set -euo pipefail
build=${1:-build}
PY=${PYTHON:-python3}
if [[ -f python/pyproject.toml ]]; then
  iso=()
  if "$PY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' 2>/dev/null; then
    iso=(--no-build-isolation)
  fi
  LOOM_BUILD_DIR="$(cd "$build" && pwd)" "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore "${iso[@]}" ./python
fi
