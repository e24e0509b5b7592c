"""What DDP on CPU can gain on this machine at all: plain PyTorch, no Lightning, no project.

The generated project's DDP-CPU throughput (runs.py) only means something next to what
hand-written DistributedDataParallel achieves with the same network on the same cores.
Each variant trains the project's MLP on random data of the digits' shape for a fixed
number of steps (AdamW, dropout on) and reports training samples per second:
- 1 process with every core as torch threads (the project's single-process default), and
  with one thread;
- 2 processes (gloo, one thread each: the ddp-cpu preset's split), DistributedDataParallel
  with its defaults, then with gradient_as_bucket_view and static_graph.
Per-process batches of 64 (the default) and 256. Variants are interleaved and repeated; the
median is quoted as a ratio to the single process with every core.

To run:
    .venv/bin/python benchmarks/ddp_plain.py            # ~2 minutes on 2 cores
    .venv/bin/python benchmarks/ddp_plain.py --smoke    # seconds: does it still run?
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from baked import bake, free_port, import_modules, machine

WARMUP_STEPS = 20


def train_steps(model: torch.nn.Module, batch_size: int, steps: int) -> float:
    """Seconds per training step after a warm-up."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch_size, 64), torch.randint(0, 10, (batch_size,))
    for step in range(WARMUP_STEPS + steps):
        if step == WARMUP_STEPS:
            start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / steps


def single_process(project: Path, batch_size: int, steps: int, threads: int) -> float:
    """Samples per second of one process with ``threads`` torch threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = network(project)
        return batch_size / train_steps(model, batch_size, steps)
    finally:
        torch.set_num_threads(previous)


def network(project: Path) -> torch.nn.Module:
    """The generated project's network, default size (imported, never copied)."""
    networks = import_modules(project, "networks")["networks"]
    torch.manual_seed(0)
    return networks.MLP((64,), 10, (256, 256), 0.3)


def _ddp_worker(
    rank: int, port: int, project: str, batch_size: int, steps: int, options: dict, out: str
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        model = DistributedDataParallel(network(Path(project)), **options)
        seconds = train_steps(model, batch_size, steps)
        dist.barrier()  # both done before either leaves the group
        if rank == 0:
            Path(out).write_text(str(2 * batch_size / seconds))
    finally:
        dist.destroy_process_group()


def two_processes(project: Path, batch_size: int, steps: int, options: dict) -> float:
    """Samples per second of both processes together (each does ``batch_size`` per step)."""
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "rate")
        args = (free_port(), str(project), batch_size, steps, options, out)
        mp.spawn(_ddp_worker, args=args, nprocs=2)
        return float(Path(out).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--smoke", action="store_true", help="1 repeat of 20 steps, batch 64")
    args = parser.parse_args()
    repeats, steps = (1, 20) if args.smoke else (args.repeats, args.steps)
    batch_sizes = (64,) if args.smoke else (64, 256)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    with tempfile.TemporaryDirectory() as workdir:
        project = bake(Path(workdir))
        print(f"machine: {machine()}; {steps} steps, median of {repeats} interleaved repeats")
        print("\n| batch per process | variant | training samples/s | vs 1 process |")
        print("|---:|---|---:|---:|")
        variants = {
            f"1 process, {cores} threads": ("threads", cores),
            "1 process, 1 thread": ("threads", 1),
            "2 processes (gloo), DDP defaults": ("ddp", {}),
            "2 processes (gloo), bucket view + static graph": (
                "ddp",
                {"gradient_as_bucket_view": True, "static_graph": True},
            ),
        }
        for batch_size in batch_sizes:
            rates: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(repeats):
                for name, (kind, setting) in variants.items():
                    rates[name].append(
                        single_process(project, batch_size, steps, setting)
                        if kind == "threads"
                        else two_processes(project, batch_size, steps, setting)
                    )
            reference = statistics.median(next(iter(rates.values())))
            for name, values in rates.items():
                rate = statistics.median(values)
                print(f"| {batch_size} | {name} | {rate:.0f} | {rate / reference:.2f}x |")


if __name__ == "__main__":
    main()
