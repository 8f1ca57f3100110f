"""PyTorch's collectives through whichever NCCL the process has (coll's library under
LD_PRELOAD, or PyTorch's own), under torchrun: every call checked against the values it
must give, one call captured in a CUDA graph, then a small data-parallel (DDP) training run
whose per-step losses are written to LOSSES (one line each) for comparison with a run on the
real NCCL. Prints "torch check ok" on rank 0 when every check passed; exits 1 otherwise.

Run: torchrun --nproc-per-node 2 bench/nccl/torch_check.py LOSSES
(bench/gpu_torch.sh runs it through both libraries).
"""
import os
import sys

import torch
import torch.distributed as dist


def check(name, got, want, failures):
    if not torch.equal(got.float().cpu(), want.float().cpu()):
        failures.append(name)
        print(f"rank {dist.get_rank()}: {name}: wrong", file=sys.stderr)


def collectives(failures):
    r, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", r)) % torch.cuda.device_count())
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        count = 4099
        x = (torch.arange(count, device=dev) % 13 + r).to(dtype)
        y = x.clone()
        dist.all_reduce(y)
        want = sum((torch.arange(count, device=dev) % 13 + q) for q in range(n)).to(dtype)
        check(f"all_reduce {dtype}", y, want, failures)
        out = torch.empty(n * count, device=dev, dtype=dtype)
        dist.all_gather_into_tensor(out, x)
        want = torch.cat([(torch.arange(count, device=dev) % 13 + q).to(dtype) for q in range(n)])
        check(f"all_gather_into_tensor {dtype}", out, want, failures)
        big = (torch.arange(n * count, device=dev) % 7 + r).to(dtype)
        rs = torch.empty(count, device=dev, dtype=dtype)
        dist.reduce_scatter_tensor(rs, big)
        full = sum((torch.arange(n * count, device=dev) % 7 + q) for q in range(n))
        check(f"reduce_scatter_tensor {dtype}", rs, full[r * count:(r + 1) * count].to(dtype), failures)
        a2a_in = (torch.arange(n * count, device=dev) % 11 + 100 * r).to(dtype)
        a2a_out = torch.empty_like(a2a_in)
        dist.all_to_all_single(a2a_out, a2a_in)
        want = torch.cat([((torch.arange(n * count, device=dev) % 11 + 100 * q)[r * count:(r + 1) * count]).to(dtype) for q in range(n)])
        check(f"all_to_all_single {dtype}", a2a_out, want, failures)
        b = x.clone() if r == n - 1 else torch.zeros_like(x)
        dist.broadcast(b, src=n - 1)
        check(f"broadcast {dtype}", b, (torch.arange(count, device=dev) % 13 + n - 1).to(dtype), failures)
    # Point-to-point (forwarded by coll's library to the real NCCL beside it).
    t = torch.full((1000,), float(r), device=dev)
    if r == 0:
        dist.send(t, dst=1)
    elif r == 1:
        got = torch.empty_like(t)
        dist.recv(got, src=0)
        check("send/recv", got, torch.zeros_like(got), failures)
    # One all_reduce captured in a CUDA graph and replayed.
    g_in = torch.full((1 << 16,), float(r + 1), device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dist.all_reduce(g_in)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    g_in.fill_(float(r + 1))
    with torch.cuda.graph(graph):
        dist.all_reduce(g_in)
    g_in.fill_(float(r + 1))
    graph.replay()
    torch.cuda.synchronize()
    check("all_reduce in a CUDA graph", g_in, torch.full_like(g_in, float(sum(q + 1 for q in range(n)))), failures)


def train(losses_path):
    r = dist.get_rank()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", r)) % torch.cuda.device_count())
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator(device="cpu").manual_seed(1000 + r)
    losses = []
    for _ in range(20):
        xb = torch.randn(32, 64, generator=gen).to(dev)
        yb = torch.randn(32, 8, generator=gen).to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if r == 0:
        with open(losses_path, "w") as f:
            for l in losses:
                f.write(f"{l!r}\n")


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", dist.get_rank())) % torch.cuda.device_count())
    failures = []
    collectives(failures)
    train(sys.argv[1])
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        print(f"rank {dist.get_rank() if dist.is_initialized() else '?'}: failed: {failures}")
        sys.exit(1)
    if int(os.environ.get("RANK", 0)) == 0:
        print("torch check ok")


if __name__ == "__main__":
    main()
