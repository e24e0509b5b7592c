"""What the generated project's training loop costs over a plain PyTorch loop, per epoch.

Three variants train the same model on the same data, batch order, augmentation, loss,
AdamW + warm-up/cosine schedule, with a validation pass every epoch:
- plain:   a hand-written PyTorch loop, as a careful engineer writes it (loss and accuracy
           summed on the device, read once per epoch);
- bare:    a Lightning Trainer with logging, checkpointing, progress bar and summary off;
- project: the generated project exactly as `python train.py` builds it from
           configs/default.yaml (logger, best and last checkpoints, signal stop, metric
           history, LR monitor, RNG state, gradient and memory monitors, model summary).
Variants are interleaved, repeated, and the median epoch time (first epoch skipped) is
quoted as a ratio to plain. Two model sizes: the default one, and a compute-bound one
whose step is >= 20 ms, where overhead should vanish.

To run:
    .venv/bin/python benchmarks/loop_overhead.py            # ~3 minutes on 2 cores
    .venv/bin/python benchmarks/loop_overhead.py --smoke    # seconds: does it still run?
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

from baked import bake, epoch_timer, import_modules, machine

SIZES = {"default": (256, 256), "compute-bound": (2048,) * 3}  # hidden widths, 64 in, 10 out


def plain_epochs(modules: dict, hidden: tuple[int, ...], epochs: int) -> list[float]:
    """Per-epoch seconds of a plain PyTorch loop doing the project's work."""
    torch.manual_seed(42)
    datamodule = modules["data.datamodule"]
    data = datamodule.DataModule()
    data.setup("fit")
    net = modules["networks"].MLP(data.input_shape, data.num_outputs, hidden, 0.3)
    task = modules["tasks.classification"].Classification(data.num_outputs, data.output_names)
    model = modules["module"].InferenceModel(net, data.input_shape, task.output_layer())
    model.standardize.set_stats(*data.input_stats())
    task.fit_output(model.output, data.train_targets())
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-3,
        fused=True,  # as the project's
    )
    train_loader, val_loader = data.train_dataloader(), data.val_dataloader()
    total = epochs * len(train_loader)
    warmup = max(1, round(0.05 * total))
    scheduler = SequentialLR(
        optimizer,
        [
            LinearLR(optimizer, start_factor=1.0 / warmup, total_iters=warmup),
            CosineAnnealingLR(optimizer, T_max=total - warmup),
        ],
        milestones=[warmup],
    )
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        model.train()
        loss_sum, correct = torch.zeros(()), torch.zeros((), dtype=torch.long)
        for x, y in train_loader:
            shifted = datamodule.random_shift(x)  # x: (B, 1, 8, 8)
            x = torch.where(torch.rand(len(x), 1, 1, 1) < data.shift_prob, shifted, x)
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            loss_sum += loss.detach() * len(y)
            correct += (logits.argmax(-1) == y).sum()
        model.eval()
        with torch.no_grad():
            for x, y in val_loader:
                logits = model(x)
                loss_sum += F.cross_entropy(logits, y) * len(y)
                correct += (logits.argmax(-1) == y).sum()
        float(loss_sum), int(correct)  # read once per epoch, as a logger would
        times.append(time.perf_counter() - start)
    return times[1:]


def bare_epochs(modules: dict, hidden: tuple[int, ...], epochs: int) -> list[float]:
    import lightning as L

    L.seed_everything(42, verbose=False)
    timer = epoch_timer()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[timer],
    )
    net = modules["networks"].MLP(hidden_sizes=hidden)
    model = modules["module"].LitModel(net=net)
    trainer.fit(model, datamodule=modules["data.datamodule"].DataModule())
    return timer.times[1:]


def project_epochs(
    modules: dict, project: Path, hidden: tuple[int, ...], epochs: int, root: Path
) -> list[float]:
    """The project's own CLI and configs/default.yaml, as train.py builds them."""
    cli = modules["training.cli"].build_cli(
        [
            f"--trainer.max_epochs={epochs}",
            f"--trainer.default_root_dir={root}",
            f"--trainer.logger.init_args.save_dir={root}",
            f"--model.net.init_args.hidden_sizes=[{', '.join(map(str, hidden))}]",
            "--trainer.enable_progress_bar=false",
        ],
        project / "configs" / "default.yaml",
    )
    timer = epoch_timer()
    cli.trainer.callbacks.append(timer)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return timer.times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, every variant")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--smoke", action="store_true", help="default model, 1 repeat of 3 epochs")
    parser.add_argument(
        "--before",
        metavar="REF",
        help="also time the project as baked from this git commit (before a change), "
        "interleaved with the others, and print after / before (a commit of the package "
        "in folders, or aa2eff7 and before)",
    )
    args = parser.parse_args()
    repeats, epochs = (1, 3) if args.smoke else (args.repeats, args.epochs)
    sizes = {name: SIZES[name] for name in (args.sizes[:1] if args.smoke else args.sizes)}

    with tempfile.TemporaryDirectory() as workdir:
        project = bake(Path(workdir))
        names = ("training.cli", "data.datamodule", "networks", "module", "tasks.classification")
        modules = import_modules(project, *names, "runtime")
        modules["runtime"].quiet_known_noise()
        before = None
        if args.before:
            project_before = bake(Path(workdir), args.before)
            before = (project_before, import_modules(project_before, "training.cli"))
        torch.set_num_threads(args.threads)  # one thread: the least noisy on a shared machine
        threads = torch.get_num_threads()
        sys.argv = ["train.py"]  # LightningCLI reads it
        print(f"machine: {machine()}; torch threads {threads}; {repeats} interleaved repeats")
        print("\n| model | variant | median epoch (ms) | ratio to plain | per train step (ms) |")
        print("|---|---|---:|---:|---:|")
        steps = steps_per_epoch(modules)
        for label, hidden in sizes.items():
            times: dict[str, list[float]] = {"plain": [], "bare": [], "project": []}
            for repeat in range(repeats):
                times["plain"] += plain_epochs(modules, hidden, epochs)
                times["bare"] += bare_epochs(modules, hidden, epochs)
                root = Path(workdir) / f"runs{repeat}"
                times["project"] += project_epochs(modules, project, hidden, epochs, root)
                if before is not None:
                    root = Path(workdir) / f"runs-before{repeat}"
                    before_epochs = project_epochs(before[1], before[0], hidden, epochs, root)
                    times.setdefault(f"project@{args.before}", []).extend(before_epochs)
            medians = {name: statistics.median(values) for name, values in times.items()}
            for name, median in medians.items():
                print(
                    f"| {label} | {name} | {median * 1e3:.1f} | {median / medians['plain']:.2f}x "
                    f"| {median * 1e3 / steps:.2f} |"
                )
            ratios = [("project / bare", medians["project"] / medians["bare"])]
            if before is not None:
                after_before = medians["project"] / medians[f"project@{args.before}"]
                ratios.append(("project after / before", after_before))
            print("\n" + "; ".join(f"{label}, {what}: {ratio:.2f}x" for what, ratio in ratios))


def steps_per_epoch(modules: dict) -> int:
    data = modules["data.datamodule"].DataModule()
    data.setup("fit")
    return len(data.train_dataloader())


if __name__ == "__main__":
    main()
