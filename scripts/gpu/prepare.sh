#!/usr/bin/env bash
# Packs what a GPU machine without Node needs to run nccl-node's GPU checks into .gpu/
# (git-ignored, under the 64 MiB a device run may carry): the Node binary
# (xz-compressed), the compiled package (dist/, bin/, the addon, the kernels'
# fatbin), its runtime dependencies (xz-compressed), and the shared
# libraries the addon links (Gloo and its dependencies). The machine's own CUDA
# driver, NCCL and cuFile are used there (scripts/gpu/run.sh finds them).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f build/Release/nccl_node.node ] || { echo "prepare: build first (bash scripts/setup.sh)" >&2; exit 1; }
[ -f build/kernels/nccl_node_kernels.fatbin ] || { echo "prepare: no kernels fatbin (nvcc missing?)" >&2; exit 1; }
npm run --silent build:ts
rm -rf .gpu && mkdir -p .gpu/pkg/build/Release .gpu/pkg/build/kernels .gpu/lib
xz -T2 -6 -c "$(command -v node)" > .gpu/node.xz
cp -r dist bin package.json .gpu/pkg/
cp build/Release/nccl_node.node .gpu/pkg/build/Release/
cp build/kernels/nccl_node_kernels.* .gpu/pkg/build/kernels/
# Every runtime dependency and what it pulls in (package-lock.json), xz-compressed:
# the CLI and the runtime import them, and nothing on that machine provides them.
node scripts/gpu/runtime-deps.mjs | tar -cf - -T - | xz -T2 -6 > .gpu/node_modules.tar.xz
# The addon's non-system libraries (Debian's libgloo and what it pulls in).
ldd build/Release/nccl_node.node | awk '/=> \// {print $3}' |
  grep -E 'libgloo|libhiredis|libibverbs|libnl-' | xargs -r -I{} cp -L {} .gpu/lib/
cp scripts/gpu/run.sh scripts/gpu/smoke.mjs scripts/gpu/torch_baseline.py .gpu/
du -sh .gpu
