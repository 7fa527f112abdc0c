#!/usr/bin/env bash
# Build the chaz-nb JupyterLab extension from nothing and run its unit tests.
#
#   .ci/labext.sh [PYTHON]
#
# PYTHON: the interpreter whose environment gets the build tool (`jupyter-builder`)
# and, for the e2e test, playwright + jupyterlab; default: .venv/bin/python, else python3.
# Steps: Debian chromium (for tests/e2e) -> npm ci from the lockfile (registry only)
# -> tsc + jupyter-builder (output: chaz_nb/labextension) -> jest.
# Set LABEXT_KEEP=1 to reuse an existing labextension/node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

PY=${1:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
PYBIN=$(cd "$(dirname "$(command -v "$PY")")" && pwd)
export PATH="$PYBIN:$PATH"

t0=$(date +%s)
say() { echo "[labext $(( $(date +%s) - t0 ))s] $*"; }

# 1. Debian's chromium for the e2e test (Playwright drives it; never `playwright install`).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing chromium (apt)"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  else
    say "WARNING: /usr/bin/chromium missing and cannot apt-get install it: the e2e test will skip"
  fi
fi

# 2. Python side: the build CLI used by `npm run build`, and the e2e test's drivers.
if ! "$PY" -c "import jupyter_builder" 2>/dev/null; then
  say "pip install jupyter-builder"
  "$PY" -m pip install -q "jupyter-builder>=1.3,<2"
fi
if ! "$PY" -c "import playwright, jupyterlab" 2>/dev/null; then
  say "pip install playwright jupyterlab"
  "$PY" -m pip install -q "playwright>=1.49" "jupyterlab>=4.6,<5"
fi

command -v node >/dev/null || { echo "node is required (v20+)"; exit 1; }
command -v npm >/dev/null || { echo "npm is required"; exit 1; }
say "node $(node --version), npm $(npm --version)"

# 3. From nothing: no node_modules, no previous build.
cd "$ROOT/labextension"
rm -rf lib tsconfig.tsbuildinfo "$ROOT/chaz_nb/labextension"
if [ "${LABEXT_KEEP:-0}" != 1 ]; then
  rm -rf node_modules
fi
t1=$(date +%s)
if [ -d node_modules ]; then
  say "reusing node_modules"
else
  say "npm ci"
  npm ci --no-audit --no-fund
fi
t2=$(date +%s)

# 4. Build: TypeScript, then the federated extension into chaz_nb/labextension.
say "npm run build"
npm run build
t3=$(date +%s)
test -f "$ROOT/chaz_nb/labextension/package.json"
test -f "$ROOT/chaz_nb/labextension/static/style.js"

# 5. Unit tests of the renderer and the sidebar (jest, jsdom).
say "npm test"
npm test
t4=$(date +%s)

say "done: npm ci $((t2 - t1))s, build $((t3 - t2))s, jest $((t4 - t3))s, total $((t4 - t0))s"
