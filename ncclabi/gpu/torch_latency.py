"""torch_latency.py - PyTorch all_reduce of one repeated tensor on Theseus
(issue 25: eager against CUDA-graph-replayed time per call), 2 or more ranks.

For each size: ITERS eager calls of dist.all_reduce on the same tensor,
timed with CUDA events around the loop; then a CUDA graph that captures
GRAPH_CALLS all_reduces of the tensor, replayed REPLAYS times, timed the
same way. Rank 0 prints one line per size:

    TORCHLAT <bytes> B eager <us> us graph <us> us ratio <eager/graph> host <us> us

host is the CPU time per eager call: the loop's wall time before its final
synchronisation over ITERS (when it is close to eager, the eager loop is
bound by the host: PyTorch's and the library's work per call, not the GPU).

The tensor holds zeros, so its values stay finite however often it is
reduced. Run by run_torch_latency.sh (torch.distributed.run, LD_AUDIT).
"""
import os
import time

import torch
import torch.distributed as dist

SIZES = [int(s) for s in os.environ.get("SIZES", "8 64 512 2048 8192 32768 65536 262144 1048576").split()]
ITERS = int(os.environ.get("ITERS", "200"))
GRAPH_CALLS = int(os.environ.get("GRAPH_CALLS", "50"))
REPLAYS = int(os.environ.get("REPLAYS", "10"))


def timed(fn, n, host=None):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    if host is not None:
        host.append((t1 - t0) * 1e6 / n)
    return start.elapsed_time(end) * 1e3 / n  # us per fn


def main():
    rank = int(os.environ["RANK"])
    dev = torch.device("cuda", int(os.environ.get("THESEUS_TORCH_DEVICE", "0")))
    torch.cuda.set_device(dev)
    try:
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:  # older PyTorch: no device_id
        dist.init_process_group("nccl")
    for nbytes in SIZES:
        x = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32, device=dev)
        for _ in range(20):
            dist.all_reduce(x)
        host = []
        eager = timed(lambda: dist.all_reduce(x), ITERS, host)
        # Capture on a side stream after warming it up there, as PyTorch's
        # CUDA graph docs ask.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(GRAPH_CALLS):
                dist.all_reduce(x)
        g.replay()
        graph = timed(g.replay, REPLAYS) / GRAPH_CALLS
        bad = int(torch.count_nonzero(x).item())
        if rank == 0:
            print(f"TORCHLAT {nbytes} B eager {eager:.2f} us graph {graph:.2f} us ratio {eager / graph:.2f} host {host[0]:.2f} us"
                  + (f" WRONG {bad} nonzero" if bad else ""), flush=True)
        del g
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("TORCHLAT done", flush=True)


if __name__ == "__main__":
    main()
