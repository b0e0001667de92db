#!/usr/bin/env bash
# Fetches NVIDIA's real headers and libraries that the ABI check (test/abi) and the
# real-library tests (test/real) compare the project's own declarations against:
#   nccl/       nccl.h + libnccl.so.2      (pip: nvidia-nccl-cu13==2.30.7)
#   cufile/     cufile.h + libcufile.so.0  (pip: nvidia-cufile)
#   cuda/       cuda.h + cudaTypedefs.h    (/usr/local/cuda/include, else pip: nvidia-cuda-runtime)
# into a cache outside the repository (once per machine), and prints that directory.
# Nothing here is copied into the repository. Exit status 3: pip could not fetch.
set -euo pipefail

NCCL_VERSION_PIN=2.30.7
dest="${NCCL_NODE_REFERENCE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nccl-node-reference}"
mkdir -p "$dest"
say() { printf 'fetch-reference: %s\n' "$*" >&2; }

# pip download into a scratch dir, then unzip only the named members (the NCCL wheel is 216 MB).
fetch_wheel() {  # <pip requirement> <target dir> <member>...
  local req=$1 target=$2
  shift 2
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  say "pip download $req"
  if ! python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$req" >"$tmp/pip.log" 2>&1; then
    tail -n 5 "$tmp/pip.log" >&2
    say "pip could not fetch $req"
    exit 3
  fi
  local out
  out=$(mktemp -d "$dest/.part.XXXXXX")  # beside the target, so the final mv is a rename
  chmod 755 "$out"
  python3 - "$tmp"/*.whl "$out" "$@" <<'EOF'
import sys, zipfile, os
whl, out, members = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(whl) as z:
    for m in members:
        with z.open(m) as src, open(os.path.join(out, os.path.basename(m)), "wb") as dst:
            dst.write(src.read())
EOF
  # Complete or absent: a killed fetch leaves no half cache, and of two concurrent
  # fetches (test runs in several checkouts) the first to finish wins.
  mv -T "$out" "$target" 2>/dev/null || { rm -rf "$out"; [ -d "$target" ]; }
}

if [ ! -f "$dest/nccl/libnccl.so.2" ]; then
  fetch_wheel "nvidia-nccl-cu13==$NCCL_VERSION_PIN" "$dest/nccl" \
    nvidia/nccl/include/nccl.h nvidia/nccl/lib/libnccl.so.2
fi
if [ ! -f "$dest/cufile/libcufile.so.0" ]; then
  fetch_wheel "nvidia-cufile" "$dest/cufile" nvidia/cu13/include/cufile.h nvidia/cu13/lib/libcufile.so.0
fi
if [ ! -f "$dest/cuda/cudaTypedefs.h" ]; then
  if [ -f /usr/local/cuda/include/cuda.h ] && [ -f /usr/local/cuda/include/cudaTypedefs.h ]; then
    out=$(mktemp -d "$dest/.part.XXXXXX")
    cp /usr/local/cuda/include/cuda.h /usr/local/cuda/include/cudaTypedefs.h "$out/"
    mv -T "$out" "$dest/cuda" 2>/dev/null || rm -rf "$out"
  else
    fetch_wheel "nvidia-cuda-runtime==13.*" "$dest/cuda" \
      nvidia/cu13/include/cuda.h nvidia/cu13/include/cudaTypedefs.h
  fi
fi
echo "$dest"
