#!/bin/bash
# Builds the NFNet inference app into ascend310_infer/out/main (or $BUILD_DIR/main).
#
#   bash build.sh            (BUILD_DIR=<dir> to build elsewhere than ascend310_infer/out)
#
# MindSpore's C++ API comes from one of two packages (README "Inference process" and docs/deployment.md):
#   - MindSpore Lite 2.x, cloud inference package: include/api + lib/libmindspore-lite.so, or the
#     mindspore_lite folder of its Python wheel (pip install mindspore-lite): include/api +
#     lib/libmindspore-extendrt_python.so (flavour "lite": the model is built from the file);
#   - full MindSpore <= 2.3: include/api + lib/libmindspore.so (flavour "full": GraphCell build).
#     The MindSpore wheels from 2.4 on ship neither.
# It is looked up, in order, in:
#   1. $MINDSPORE_PATH, then $LITE_HOME (each also with /runtime, the Lite tarball's layout);
#   2. the mindspore_lite, then mindspore, Python package of $PYTHON (default python3).
# The first folder that holds one wins; build.sh prints which. Needs cmake >= 3.14 and g++ >= 7.3
# (C++17; CXX=<compiler> to pick another). Running on Ascend also needs the Ascend toolkit's
# libraries at run time (source its set_env.sh); the build only reports whether it found one.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
BUILD_DIR="${BUILD_DIR:-$HERE/out}"
CXX="${CXX:-g++}"
MIN_GCC=7.3

die() {
  echo "error: $*" >&2
  exit 1
}

flavour_of() {  # flavour_of <dir>: "lite", "lite-wheel", "full", or nothing when <dir> holds no C++ API
  [ -f "$1/include/api/model.h" ] || return 0
  if [ -f "$1/lib/libmindspore-lite.so" ]; then
    echo lite
  elif [ -f "$1/lib/libmindspore-extendrt_python.so" ]; then
    echo lite-wheel
  elif [ -f "$1/lib/libmindspore.so" ]; then
    echo full
  fi
}

package_dir() {  # folder of an installed Python package, without importing it
  "$PYTHON" -c 'import importlib.util, os, sys
spec = importlib.util.find_spec(sys.argv[1])
print(os.path.dirname(spec.origin) if spec and spec.origin else "")' "$1" 2>/dev/null || true
}

package_version() {  # package_version <root>: the MindSpore (Lite) version of a root, or nothing
  local file="$1/version.py" name
  if [ -f "$file" ]; then  # a Python package: __version__ = '2.0.0'
    sed -n "s/^__version__ *= *['\"]\([0-9][0-9.a-z]*\)['\"].*/\1/p" "$file" | head -n 1
    return 0
  fi
  for name in "$(basename "$1")" "$(basename "$(dirname "$1")")"; do  # mindspore-lite-2.0.0-linux-x64[/runtime]
    if [[ "$name" =~ ^mindspore-lite-([0-9]+\.[0-9]+\.[0-9]+) ]]; then
      echo "${BASH_REMATCH[1]}"
      return 0
    fi
  done
}

version_at_least() {  # version_at_least <version> <minimum>
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

check_compiler() {
  command -v "$CXX" >/dev/null 2>&1 || die "C++ compiler $CXX not found; install g++ >= $MIN_GCC (C++17)"
  local version
  version="$("$CXX" -dumpfullversion 2>/dev/null || "$CXX" -dumpversion 2>/dev/null || true)"
  if "$CXX" --version 2>/dev/null | grep -qi clang; then
    echo "compiler: $CXX (clang $version)"
  elif [ -z "$version" ] || ! version_at_least "$version" "$MIN_GCC"; then
    die "$CXX ${version:-of unknown version} is too old: the app needs g++ >= $MIN_GCC (C++17, the Ascend toolkits' baseline)"
  else
    echo "compiler: $CXX (gcc $version)"
  fi
}

command -v cmake >/dev/null 2>&1 || die "cmake not found; install cmake >= 3.14"
check_compiler

candidates=()
for root in "${MINDSPORE_PATH:-}" "${LITE_HOME:-}"; do
  if [ -n "$root" ]; then
    candidates+=("$root" "$root/runtime")
  fi
done
for pkg in mindspore_lite mindspore; do
  dir="$(package_dir "$pkg")"
  if [ -n "$dir" ]; then
    candidates+=("$dir")
  fi
done
MS_ROOT="" FLAVOUR=""
for dir in ${candidates[@]+"${candidates[@]}"}; do
  FLAVOUR="$(flavour_of "$dir")"
  if [ -n "$FLAVOUR" ]; then
    MS_ROOT="$dir"
    break
  fi
done
if [ -z "$MS_ROOT" ]; then
  if [ -n "${MINDSPORE_PATH:-}${LITE_HOME:-}" ]; then
    die "MINDSPORE_PATH=${MINDSPORE_PATH:-} LITE_HOME=${LITE_HOME:-} hold no MindSpore C++ API" \
        "(include/api/model.h with lib/libmindspore-lite.so, lib/libmindspore-extendrt_python.so or lib/libmindspore.so)"
  fi
  die "MindSpore C++ API not found: MindSpore >= 2.4 wheels ship none; unpack the MindSpore Lite 2.x" \
      "cloud inference package and set LITE_HOME=<its folder>, or pip install mindspore-lite into" \
      "PYTHON=<its interpreter> (or MINDSPORE_PATH=<full MindSpore <= 2.3>)"
fi
case "$FLAVOUR" in
  lite) echo "MindSpore C++ API: MindSpore Lite at $MS_ROOT (model built from the file)" ;;
  lite-wheel)
    echo "MindSpore C++ API: MindSpore Lite Python wheel at $MS_ROOT" \
         "(lib/libmindspore-extendrt_python.so; model built from the file)"
    FLAVOUR=lite ;;
  full) echo "MindSpore C++ API: full MindSpore at $MS_ROOT (model built through GraphCell)" ;;
esac

# Lite 2.0.0's mindspore::Version() answers "": the app falls back on this to check a MINDIR's exporter
MS_VERSION="$(package_version "$MS_ROOT")"
echo "MindSpore (Lite) version: ${MS_VERSION:-unknown (then the app checks the exporter of a MINDIR only if the runtime tells its version)}"

ASCEND_DIR="${ASCEND_HOME_PATH:-${ASCEND_TOOLKIT_HOME:-/usr/local/Ascend/ascend-toolkit/latest}}"
if [ -d "$ASCEND_DIR" ]; then
  echo "Ascend toolkit: $ASCEND_DIR"
else
  echo "note: no Ascend toolkit found (ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME, $ASCEND_DIR);" \
       "--device_type=Ascend* needs it at run time (source its set_env.sh); CPU does not"
fi

mkdir -p "$BUILD_DIR"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
cd "$BUILD_DIR"
cmake "$HERE" -DMINDSPORE_PATH="$MS_ROOT" -DMS_FLAVOUR="$FLAVOUR" -DMS_VERSION="$MS_VERSION" -DCMAKE_CXX_COMPILER="$(command -v "$CXX")"
make -j"$(nproc 2>/dev/null || echo 2)"
echo "built $BUILD_DIR/main ($FLAVOUR)"
