#!/usr/bin/env bash
# Installs the Python package (python/) over the freshly built libloom: `scripts/install-python.sh
# [BUILD_DIR]` (make python, make demo and make test run it). The package bundles that build's
# libloom.so.0, so it runs without LD_LIBRARY_PATH. It is built once as a wheel, installed into
# this Python (what users import) and also unpacked into BUILD_DIR/python, which the tests put
# first on PYTHONPATH: each build tests its own package, whatever another checkout installed.
# Builds without isolation when setuptools is already installed (no network needed).
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then  # the comment above is the help
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -euo pipefail
build=${1:-build}
PY=${PYTHON:-python3}
[[ -f python/pyproject.toml ]] || exit 0
build_abs="$(cd "$build" && pwd)"
pip_=("$PY" -m pip -q --disable-pip-version-check)
iso=()
if "$PY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' 2>/dev/null; then
  iso=(--no-build-isolation)
fi
rm -rf "$build_abs/wheels" "$build_abs/python"
LOOM_BUILD_DIR="$build_abs" "${pip_[@]}" wheel --no-deps "${iso[@]}" -w "$build_abs/wheels" ./python
wheel=$(ls "$build_abs"/wheels/loom-*.whl)
"${pip_[@]}" install --root-user-action=ignore --force-reinstall --no-deps "$wheel"
"${pip_[@]}" install --root-user-action=ignore --no-deps --target "$build_abs/python" "$wheel"
