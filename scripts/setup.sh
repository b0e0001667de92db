#!/usr/bin/env bash
# Installs what nccl-node needs on a Debian/Ubuntu machine that has only Node:
# system packages, npm dependencies and the native build. Safe to run again; it
# skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }

# 1. System packages: a C++ toolchain, cmake, Gloo (the CPU backend) and iproute2.
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v python3 >/dev/null 2>&1 || need+=(python3)
[ -f /usr/include/gloo/allreduce.h ] || need+=(libgloo-dev)
# ss (iproute2): test/comm/tcp-receive-buffer.test.ts reads each socket's buffer from it.
command -v ss >/dev/null 2>&1 || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  say "installing system packages: ${need[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "setup: need root (or sudo) to install: ${need[*]}" >&2
      exit 1
    fi
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# 2. npm dependencies (the lock file pins them).
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "installing npm dependencies"
  npm ci --ignore-scripts --no-audit --no-fund
fi

# 3. The addon, the stand-in GPU libraries and C++ benchmark baselines (NCCL_NODE_DEV)
#    and, where nvcc exists, the CUDA kernels.
say "building the native addon (cmake-js)"
# cmake-js passes -D options only when it configures; a build directory configured
# earlier (e.g. by a user-style install) keeps its cache, so switch the option there.
if [ -f build/CMakeCache.txt ] && ! grep -q '^NCCL_NODE_DEV:BOOL=ON' build/CMakeCache.txt; then
  cmake -DNCCL_NODE_DEV=ON build >/dev/null
fi
npx --no-install cmake-js compile --out build --CDNCCL_NODE_DEV=ON >build-native.log 2>&1 || {
  tail -n 40 build-native.log >&2
  echo "setup: the native build failed; the whole log is in build-native.log" >&2
  exit 1
}
say "ready: $(ls build/Release/nccl_node.node)"
