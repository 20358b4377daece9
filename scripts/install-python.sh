#!/usr/bin/env bash
# Installs the Python package (python/) over the freshly built libloom, if the package exists yet.
set -euo pipefail
build=${1:-build}
if [[ -f python/pyproject.toml ]]; then
  LOOM_BUILD_DIR="$(cd "$build" && pwd)" ${PYTHON:-python3} -m pip install -q --disable-pip-version-check ./python
fi
