"""torch_shrink.py — PyTorch's NCCL process group on Theseus when a rank dies
and the survivors shrink it away (issue 26): run_resilience.sh starts it as 3
plain processes on one GPU under MPS, with LD_AUDIT pointing at
libtheseus_audit_nccl.so, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set and
TORCH_NCCL_ASYNC_ERROR_HANDLING=0 (errors surface as exceptions, the watchdog
does not tear the process down).

Every rank all-reduces a tensor for a few steps (checked); then the last rank
enqueues one more all_reduce and SIGKILLs itself. The survivors go on until a
call raises, then call torch.distributed.shrink_group([victim],
shrink_flags=SHRINK_ABORT) — ncclCommShrink with NCCL_SHRINK_ABORT — and
all-reduce on the group it returns, checking the result. PyTorch refuses the
shrink when ncclGetVersion() is below 2.27 (Theseus reports 2.25.1): the
script then says so and cleans up. Output: "TORCHSHRINK rank R ..." lines;
exit 0 when the survivor got an error and either shrank and all-reduced
correctly or was refused cleanly.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def first_line(e):
    return str(e).splitlines()[0] if str(e) else ""


def cleanup(rank):
    try:
        abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
        if abort is not None:
            abort()
        else:
            dist.destroy_process_group()
        print(f"TORCHSHRINK rank {rank} parent group released", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"TORCHSHRINK rank {rank} releasing the parent raised {type(e).__name__}: {first_line(e)}", flush=True)


def reinit(rank, survivors, dev):
    """The survivors continue without shrink_group: a new process group of
    their own (a new store on the next port), an all_reduce checked."""
    port = int(os.environ["MASTER_PORT"]) + 1
    me = survivors.index(rank)
    try:
        dist.init_process_group("nccl", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}", rank=me,
                                world_size=len(survivors), device_id=dev)
    except TypeError:
        dist.init_process_group("nccl", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}", rank=me,
                                world_size=len(survivors))
    y = torch.full((1 << 16,), float(rank + 1), dtype=torch.float32, device=dev)
    dist.all_reduce(y)
    torch.cuda.synchronize()
    ok = torch.equal(y, torch.full_like(y, float(sum(r + 1 for r in survivors))))
    print(f"TORCHSHRINK rank {rank} continued on a new group of {len(survivors)} (re-initialised): all_reduce {'ok' if ok else 'WRONG'}", flush=True)
    dist.destroy_process_group()
    print(f"TORCHSHRINK rank {rank} exits", flush=True)
    return ok


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    victim = world - 1
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    try:
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:  # older PyTorch: no device_id
        dist.init_process_group("nccl")
    x = torch.ones(4096, dtype=torch.float32, device=dev)
    for _ in range(20):
        x.fill_(1.0)
        dist.all_reduce(x)
    torch.cuda.synchronize()
    ok = torch.equal(x, torch.full_like(x, float(world)))
    print(f"TORCHSHRINK rank {rank}/{world} torch {torch.__version__} before: {'ok' if ok else 'WRONG'}", flush=True)
    if rank == victim:
        dist.all_reduce(x, async_op=True)  # in flight
        print(f"TORCHSHRINK rank {rank} dies", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    err = None
    try:
        for i in range(100000):
            dist.all_reduce(x)
            if i % 10 == 0:
                torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the point is which exception
        err = e
    print(f"TORCHSHRINK rank {rank} raised {type(err).__name__} after {time.monotonic() - t0:.2f} s: {first_line(err)}", flush=True)
    if err is None:
        sys.exit(1)
    shrink = getattr(dist, "shrink_group", None)
    if shrink is None:
        print(f"TORCHSHRINK rank {rank} shrink_group missing in torch {torch.__version__}", flush=True)
        cleanup(rank)
        sys.exit(0)
    flag = getattr(dist, "SHRINK_ABORT", getattr(dist.distributed_c10d, "SHRINK_ABORT", 1))
    survivors = [r for r in range(world) if r != victim]
    try:
        g = shrink([victim], shrink_flags=flag)
    except Exception as e:  # noqa: BLE001
        print(f"TORCHSHRINK rank {rank} shrink_group raised {type(e).__name__}: {first_line(e)}", flush=True)
        cleanup(rank)
        sys.exit(0 if reinit(rank, survivors, dev) else 1)
    y = torch.full((1 << 16,), float(rank + 1), dtype=torch.float32, device=dev)
    for _ in range(5):
        y.fill_(float(rank + 1))
        dist.all_reduce(y, group=g)
    torch.cuda.synchronize()
    want = float(sum(r + 1 for r in survivors))
    ok = torch.equal(y, torch.full_like(y, want))
    size = g.size() if hasattr(g, "size") else -1
    print(f"TORCHSHRINK rank {rank} shrank: a group of {size} ranks, all_reduce {'ok' if ok else 'WRONG'}", flush=True)
    try:
        dist.destroy_process_group(g)
    except Exception as e:  # noqa: BLE001
        print(f"TORCHSHRINK rank {rank} destroying the new group raised {type(e).__name__}: {first_line(e)}", flush=True)
    cleanup(rank)
    print(f"TORCHSHRINK rank {rank} exits", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
