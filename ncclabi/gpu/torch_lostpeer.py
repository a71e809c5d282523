"""torch_lostpeer.py — PyTorch's NCCL process group on Theseus when a rank
dies in the middle of a training loop (issue 21, "the crash after a lost
peer"): the survivor must get a DistBackendError (or be torn down by
PyTorch's watchdog with SIGABRT, as TORCH_NCCL_ASYNC_ERROR_HANDLING asks),
and never die of SIGSEGV.

run_torch_lostpeer.sh starts it as plain processes (not torchrun, whose
agent would stop the survivor as soon as the victim dies), with LD_AUDIT
pointing at libtheseus_audit_nccl.so, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
set:

    LD_AUDIT=.../libtheseus_audit_nccl.so RANK=0 WORLD_SIZE=2 ... python3 torch_lostpeer.py

Every rank all-reduces four buckets in place step after step (repeats that
the library launches from C); after LOSTPEER_STEPS steps the last rank
enqueues one more all_reduce and SIGKILLs itself. The others go on until a
call or a synchronize raises, print the exception, call
destroy_process_group (as an application's cleanup does), and exit 0.
Output: "TORCHLOST rank R ..." lines.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    steps = int(os.environ.get("LOSTPEER_STEPS", "50"))
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    try:
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:  # older PyTorch: no device_id
        dist.init_process_group("nccl")
    print(f"TORCHLOST rank {rank}/{world} torch {torch.__version__} up", flush=True)
    buckets = [torch.ones(n, dtype=torch.float32, device=dev) for n in (256, 4096, 65536, 1 << 20)]
    for _ in range(steps):
        for b in buckets:
            b.fill_(1.0)
            dist.all_reduce(b)
    torch.cuda.synchronize()
    ok = all(torch.equal(b, torch.full_like(b, float(world))) for b in buckets)
    print(f"TORCHLOST rank {rank} {steps} steps {'ok' if ok else 'WRONG'}", flush=True)
    if rank == world - 1:
        dist.all_reduce(buckets[-1], async_op=True)  # in flight
        print(f"TORCHLOST rank {rank} dies", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    err = None
    try:
        for i in range(100000):
            for b in buckets:
                dist.all_reduce(b)
            if i % 10 == 0:
                torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the point is which exception
        err = e
    took = time.monotonic() - t0
    print(f"TORCHLOST rank {rank} raised {type(err).__name__} after {took:.2f} s: {str(err).splitlines()[0] if err else ''}", flush=True)
    try:
        dist.destroy_process_group()
        print(f"TORCHLOST rank {rank} destroy_process_group returned", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"TORCHLOST rank {rank} destroy_process_group raised {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
    print(f"TORCHLOST rank {rank} exits", flush=True)
    sys.exit(0 if err is not None else 1)


if __name__ == "__main__":
    main()
