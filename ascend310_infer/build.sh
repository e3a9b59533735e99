#!/bin/bash
# Builds the NFNet inference app into ascend310_infer/out/main (or $BUILD_DIR/main).
#
#   bash build.sh            (BUILD_DIR=<dir> to build elsewhere than ascend310_infer/out)
#
# MindSpore's C++ API (include/api/model.h and lib/libmindspore.so, or MindSpore Lite's
# libmindspore-lite.so) is looked up, in order, in:
#   1. $MINDSPORE_PATH (or $MINDSPORE_PATH/runtime, the Lite package layout);
#   2. the mindspore, then mindspore_lite, Python package of $PYTHON (default python3).
# Running on Ascend also needs the Ascend toolkit's libraries at run time (source its
# set_env.sh); the build only reports whether it found one.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
BUILD_DIR="${BUILD_DIR:-$HERE/out}"

die() {
  echo "error: $*" >&2
  exit 1
}

has_api() {
  [ -f "$1/include/api/model.h" ] && { [ -f "$1/lib/libmindspore.so" ] || [ -f "$1/lib/libmindspore-lite.so" ]; }
}

package_dir() {  # folder of an installed Python package, without importing it
  "$PYTHON" -c 'import importlib.util, os, sys
spec = importlib.util.find_spec(sys.argv[1])
print(os.path.dirname(spec.origin) if spec and spec.origin else "")' "$1" 2>/dev/null || true
}

find_mindspore() {
  local candidates=() dir pkg
  if [ -n "${MINDSPORE_PATH:-}" ]; then
    candidates+=("$MINDSPORE_PATH" "$MINDSPORE_PATH/runtime")
  fi
  for pkg in mindspore mindspore_lite; do
    dir="$(package_dir "$pkg")"
    if [ -n "$dir" ]; then
      candidates+=("$dir")
    fi
  done
  for dir in "${candidates[@]}"; do
    if has_api "$dir"; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}

command -v cmake >/dev/null 2>&1 || die "cmake not found; install cmake >= 3.14"
command -v "${CXX:-g++}" >/dev/null 2>&1 || die "C++ compiler ${CXX:-g++} not found; install g++ >= 7 (C++17)"

if ! MS_ROOT="$(find_mindspore)"; then
  if [ -n "${MINDSPORE_PATH:-}" ]; then
    die "MINDSPORE_PATH=$MINDSPORE_PATH holds no MindSpore C++ API (include/api/model.h and lib/libmindspore.so)"
  fi
  die "MindSpore C++ API not found: install the MindSpore (Ascend/GPU) or MindSpore Lite package for $PYTHON," \
      "or set MINDSPORE_PATH to a folder holding include/api/model.h and lib/libmindspore.so"
fi
echo "MindSpore C++ API: $MS_ROOT"

ASCEND_DIR="${ASCEND_HOME_PATH:-${ASCEND_TOOLKIT_HOME:-/usr/local/Ascend/ascend-toolkit/latest}}"
if [ -d "$ASCEND_DIR" ]; then
  echo "Ascend toolkit: $ASCEND_DIR"
else
  echo "note: no Ascend toolkit found (ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME, $ASCEND_DIR);" \
       "--device_type=Ascend needs it at run time (source its set_env.sh)"
fi

mkdir -p "$BUILD_DIR"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
cd "$BUILD_DIR"
cmake "$HERE" -DMINDSPORE_PATH="$MS_ROOT"
make -j"$(nproc 2>/dev/null || echo 2)"
echo "built $BUILD_DIR/main"
