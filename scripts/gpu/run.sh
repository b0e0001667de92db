#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after scripts/gpu/prepare.sh
# made .gpu/ here (carried with the device tool's `carry: [".gpu"]`). Unpacks Node,
# points the addon at the machine's CUDA driver, NCCL and cuFile (the Python
# environment's nvidia-* wheels), runs smoke.mjs (every check prints one JSON line)
# and nccl-node bench, and leaves the logs in $OUT (or .gpu/out).
# --standins: the same run here, on the stand-in libraries (a dry run of the script).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
# Node unpacks outside .gpu/, so a dry run here leaves .gpu/ as small as prepare.sh made it.
# So do the runtime dependencies, removed again on exit.
bin=$(mktemp -d); trap 'rm -rf "$bin" "$here/pkg/node_modules"' EXIT
mkdir -p "$out"
xz -dc "$here/node.xz" > "$bin/node" && chmod +x "$bin/node"
xz -dc "$here/node_modules.tar.xz" | tar -xf - -C "$here/pkg"
export PATH="$bin:$PATH" LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NODE_ADDON="$here/pkg/build/Release/nccl_node.node"
export NCCL_NODE_KERNELS="$here/pkg/build/kernels/nccl_node_kernels.fatbin"
standins_run=0
if [ "${1:-}" = "--standins" ]; then
  standins_run=1
  export NN_STANDINS=1  # smoke.mjs: smaller buffers (the stand-ins' memory is host memory)
  standins=$(cd "${NN_STANDINS_DIR:-$here/../build/standins}" && pwd)
  export NCCL_NODE_LIBCUDA="$standins/libcuda.so.1" NCCL_NODE_LIBNCCL="$standins/libnccl.so.2"
  export NCCL_NODE_LIBNVML="$standins/libnvidia-ml.so.1" NCCL_NODE_LIBCUFILE="$standins/libcufile.so.0"
else
  py=$(command -v python3)
  lib() { "$py" -c "import importlib, os, sys; m = importlib.import_module(sys.argv[1]); print(os.path.join(list(m.__path__)[0], sys.argv[2]))" "$@" 2>/dev/null; }
  nccl=$(lib nvidia.nccl lib/libnccl.so.2); [ -f "$nccl" ] && export NCCL_NODE_LIBNCCL="$nccl"
  for c in "$(lib nvidia.cu13 lib/libcufile.so.0)" "$(lib nvidia.cufile lib/libcufile.so.0)"; do
    [ -f "$c" ] && export NCCL_NODE_LIBCUFILE="$c" && break
  done
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1
fi
env | grep -E '^NCCL_NODE_' > "$out/env.txt"
node --version > "$out/node-version.txt"
cd "$here"
NN_PKG="$here/pkg" node smoke.mjs 2>&1 | tee "$out/smoke.jsonl"
smoke=${PIPESTATUS[0]}
# nccl-node bench over the collectives torch_baseline.py times too (every size
# checked on the device: "# Out of bounds values : 0 OK"), alternating with that
# baseline for NN_BENCH_ROUNDS rounds (3), so that both see the same machine's drift;
# scripts/gpu/compare-torch.mjs takes the medians.
max=512M; rounds=${NN_BENCH_ROUNDS:-3}
[ $standins_run = 1 ] && max=32M && rounds=1
bench=0
for r in $(seq 1 "$rounds"); do
  for coll in all_reduce all_gather reduce_scatter broadcast alltoall; do
    node pkg/bin/nccl-node.js bench ${coll}_perf -b 8 -e $max -f 4 -g 1 --nproc-per-node 1 -J "$out/bench-$coll-r$r.json" > "$out/bench-$coll-r$r.txt" 2>&1
    [ $? -eq 0 ] && grep -q '# Out of bounds values : 0 OK' "$out/bench-$coll-r$r.txt" || { bench=1; cat "$out/bench-$coll-r$r.txt"; }
  done
  if [ $standins_run = 0 ]; then
    PYTHONUNBUFFERED=1 python3 torch_baseline.py $((512 << 20)) > "$out/torch-baseline-r$r.jsonl" 2>> "$out/torch-baseline.err"
    echo "torch baseline round $r exit $?"
  fi
done
node pkg/bin/nccl-node.js doctor --json > "$out/doctor.json" 2>&1
# --numa-binding with the real driver's PCI address against sysfs (a record, not a gate:
# the stand-in GPUs' addresses are not in this machine's sysfs).
printf 'console.log(JSON.stringify({ cpus: process.env.NCCL_NODE_CPUS }));\n' > "$out/numa-rank.mjs"
{ node pkg/bin/nccl-node.js run --nproc-per-node 1 --numa-binding node "$out/numa-rank.mjs"; echo "exit $?"
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] && echo "$(basename "$d") numa_node $(cat "$d/numa_node")"
  done
  grep -H . /sys/devices/system/node/node*/cpulist; } > "$out/numa-binding.txt" 2>&1
echo "smoke exit $smoke, bench exit $bench"
[ "$smoke" -eq 0 ] && [ "$bench" -eq 0 ]
