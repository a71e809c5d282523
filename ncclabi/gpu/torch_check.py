"""torch_check.py — PyTorch's NCCL process group on Theseus, value-checked.

Run it as torchrun would (run_torch_check.sh does, with LD_AUDIT pointing at
libtheseus_audit_nccl.so so that PyTorch's libnccl.so.2 is Theseus):

    LD_AUDIT=build/prefix/lib/libtheseus_audit_nccl.so THESEUS_ALLOW_SHARED_DEVICE=1 \\
        torchrun --standalone --nproc-per-node=4 ncclabi/gpu/torch_check.py

Every rank uses GPU 0 (several ranks on one GPU under MPS). It runs
all_reduce (sum, avg, max, product; float32, bfloat16, int64), all_gather_into_tensor,
reduce_scatter_tensor, broadcast, reduce, the same four buckets all-reduced
step after step (a training loop), all_to_all_single (equal splits:
grouped ncclSend/ncclRecv or ncclAlltoAll, which Theseus runs as its
all-to-all), barrier, a new_group of the even ranks (ncclCommSplit or a new
communicator) with a collective on it, split_group when this PyTorch has it,
and destroy_process_group; every result is compared with a value computed on
the CPU. It prints one line per check, the NCCL library the process really
loaded, and exits non-zero on any mismatch or error.
"""

import os
import sys
import traceback

import torch
import torch.distributed as dist


def loaded_nccl():
    """Paths of the NCCL libraries mapped into this process."""
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if "libtheseus_nccl" in p or "libnccl" in p:
                out.add(p)
    return sorted(out)


class Checker:
    def __init__(self, rank, world):
        self.rank, self.world, self.fails, self.n = rank, world, 0, 0

    def check(self, name, got, want):
        self.n += 1
        got_c = got.detach().to("cpu")
        ok = got_c.dtype == want.dtype and got_c.shape == want.shape and torch.equal(got_c, want)
        if not ok:
            self.fails += 1
            print(f"TORCHCHECK rank {self.rank} FAIL {name}: got {got_c.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}",
                  flush=True)
        else:
            print(f"TORCHCHECK rank {self.rank} ok {name}", flush=True)


def inputs(rank, n, dtype, salt=0):
    # small integers: every reduction order gives the same result in every type
    base = torch.arange(n, dtype=torch.int64)
    return ((base + rank + salt) % 3 + 1).to(dtype)


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ.get("THESEUS_TORCH_DEVICE", "0")))
    torch.cuda.set_device(dev)
    c = Checker(rank, world)
    print(f"TORCHCHECK rank {rank}/{world} torch {torch.__version__} nccl {torch.cuda.nccl.version()} device {dev}", flush=True)
    try:
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:  # older PyTorch: no device_id
        dist.init_process_group("nccl")
    print(f"TORCHCHECK rank {rank} NCCL loaded: {loaded_nccl()}", flush=True)

    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.MAX, "max"), (dist.ReduceOp.PRODUCT, "prod")):
            for n in (1, 1031, 1 << 20):
                x = inputs(rank, n, dtype).to(dev)
                dist.all_reduce(x, op=op)
                parts = [inputs(r, n, dtype) for r in range(world)]
                want = parts[0].clone()
                for p in parts[1:]:
                    want = want + p if name == "sum" else torch.maximum(want, p) if name == "max" else want * p
                c.check(f"all_reduce {name} {dtype} n={n}", x, want)
    x = inputs(rank, 4099, torch.float32).to(dev)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    want = sum(inputs(r, 4099, torch.float32) for r in range(world)) / world
    c.check("all_reduce avg float32", x, want)

    for n in (7, 65536):
        x = inputs(rank, n, torch.float16, 5).to(dev)
        out = torch.empty(world * n, dtype=torch.float16, device=dev)
        dist.all_gather_into_tensor(out, x)
        c.check(f"all_gather_into_tensor n={n}", out, torch.cat([inputs(r, n, torch.float16, 5) for r in range(world)]))

        x = inputs(rank, world * n, torch.float32, 2).to(dev)
        out = torch.empty(n, dtype=torch.float32, device=dev)
        dist.reduce_scatter_tensor(out, x)
        full = sum(inputs(r, world * n, torch.float32, 2) for r in range(world))
        c.check(f"reduce_scatter_tensor n={n}", out, full[rank * n:(rank + 1) * n])

    for root in (0, world - 1):
        x = (inputs(rank, 3000, torch.int64, 9) if rank == root else torch.zeros(3000, dtype=torch.int64)).to(dev)
        dist.broadcast(x, src=root)
        c.check(f"broadcast root={root}", x, inputs(root, 3000, torch.int64, 9))

        x = inputs(rank, 2049, torch.float32, 4).to(dev)
        dist.reduce(x, dst=root)
        if rank == root:
            c.check(f"reduce root={root}", x, sum(inputs(r, 2049, torch.float32, 4) for r in range(world)))

    for n in (1, 1000):
        send = torch.cat([inputs(rank * 31 + q, n, torch.float32) for q in range(world)]).to(dev)
        recv = torch.empty(world * n, dtype=torch.float32, device=dev)
        dist.all_to_all_single(recv, send)
        c.check(f"all_to_all_single n={n}", recv, torch.cat([inputs(r * 31 + rank, n, torch.float32) for r in range(world)]))

    # A training loop's pattern: the same buckets all-reduced in place, step
    # after step (the NCCL library launches such repeats from C: docs/ncclabi.md,
    # "Launches from C"). Every element ends at world**steps, exact in float32: a
    # lost or repeated call shows.
    if world & (world - 1) == 0:
        steps = 100 // max(1, world.bit_length() - 1)
    else:
        steps = 1
        while world ** (steps + 1) < (1 << 24):
            steps += 1
    buckets = [torch.ones(n, dtype=torch.float32, device=dev) for n in (256, 512, 1024, 2048)]
    for _ in range(steps):
        for b in buckets:
            dist.all_reduce(b)
    for b in buckets:
        c.check(f"repeated all_reduce n={b.numel()} x{steps}", b, torch.full((b.numel(),), float(world ** steps)))

    dist.barrier()
    c.check("barrier", torch.ones(1), torch.ones(1))

    evens = list(range(0, world, 2))
    g = dist.new_group(ranks=evens)
    if rank in evens:
        x = inputs(rank, 513, torch.float32, 1).to(dev)
        dist.all_reduce(x, group=g)
        c.check(f"new_group {evens} all_reduce", x, sum(inputs(r, 513, torch.float32, 1) for r in evens))
    if hasattr(dist, "split_group"):
        halves = [list(range(0, world // 2)), list(range(world // 2, world))]
        mine = halves[0] if rank < world // 2 else halves[1]
        try:
            sg = dist.split_group(split_ranks=halves)
            x = inputs(rank, 257, torch.int64, 3).to(dev)
            dist.all_reduce(x, group=sg)
            c.check(f"split_group {mine} all_reduce", x, sum(inputs(r, 257, torch.int64, 3) for r in mine))
        except Exception as e:  # a failure of this check, not of the script
            c.n += 1
            c.fails += 1
            print(f"TORCHCHECK rank {rank} FAIL split_group: {e!r}", flush=True)
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    c.check("destroy_process_group", torch.ones(1), torch.ones(1))
    print(f"TORCHCHECK rank {rank} done: {c.n} checks, {c.fails} failures", flush=True)
    return 1 if c.fails else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        print(f"TORCHCHECK rank {os.environ.get('RANK')} ERROR", flush=True)
        sys.exit(2)
