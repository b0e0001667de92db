#!/usr/bin/env bash
# Builds the addon with node-gyp from binding.gyp (the same sources.json list that
# CMake reads) in a scratch copy, then loads it and runs a one-rank all-reduce, so
# the node-gyp route cannot rot unnoticed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r binding.gyp sources.json package.json native "$work/"
ln -s "$root/node_modules" "$work/node_modules"
(cd "$work" && npx --no-install node-gyp rebuild -j 2 >"$work/gyp.log" 2>&1) || { tail -n 40 "$work/gyp.log" >&2; exit 1; }
NCCL_NODE_ADDON="$work/build/Release/nccl_node.node" node --import tsx -e "
  const { init } = await import('$root/src/index.ts');
  const comm = await init({ rank: 0, worldSize: 1, backend: 'gloo' });
  const a = new Float32Array([1, 2, 3]);
  await comm.allReduce(a, { op: 'max' });
  await comm.destroy();
  if (a.join() !== '1,2,3') throw new Error('node-gyp build gave ' + a.join());
  console.log('node-gyp build: loads and reduces');
"
