"""The baseline beside nccl-node's GPU bench (scripts/gpu/run.sh): torch.distributed on
NCCL, one rank, the same collectives and sizes, timed as nccl-tests times them (20
back-to-back ops between two stream synchronisations, after a warm-up), plus one
awaited 8-byte all-reduce per call as smoke.mjs's awaited-latency measures it.
Prints one JSON object per line."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

ITERS = 20
SIZES = [8 * 4**k for k in range(14)]  # 8 B .. 512 MiB, as -b 8 -e 512M -f 4


def timed(fn):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(ITERS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / ITERS * 1e6


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29631")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else SIZES[-1]
    print(json.dumps({"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                      "device": torch.cuda.get_device_name(0)}), flush=True)
    for size in [s for s in SIZES if s <= max_bytes]:
        n = size // 4
        x = torch.ones(n, dtype=torch.float32, device="cuda")
        y = torch.empty_like(x)
        ops = {
            "all_reduce": lambda: dist.all_reduce(x),
            "all_gather": lambda: dist.all_gather_into_tensor(y, x),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(y, x),
            "broadcast": lambda: dist.broadcast(x, 0),
            "alltoall": lambda: dist.all_to_all_single(y, x),
        }
        for name, fn in ops.items():
            print(json.dumps({"coll": name, "bytes": size, "us": timed(fn)}), flush=True)
    x = torch.zeros(2, dtype=torch.float32, device="cuda")
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(2000):
            dist.all_reduce(x)
            torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) / 2000 * 1e6)
    per.sort()
    print(json.dumps({"awaitedLatencyUs": per, "median": per[2]}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
