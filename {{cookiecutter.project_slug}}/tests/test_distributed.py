"""DDP on 2 CPU processes, started by Lightning and by torchrun: disjoint data shards, one
checkpoint folder and one summary.json, a fair share of the cores for each process."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.runtime import available_cores

from .conftest import DDP_RUN_ARGS, RANK_PROBE, DDPRuns
from .subprocesses import run_train


@pytest.mark.slow
@pytest.mark.parametrize(
    "torchrun",
    [
        # What reaches the logger is rank zero's under either launcher: one is enough for
        # the other loggers' runs of the `logger` tests.
        pytest.param(False, id="lightning-launcher", marks=pytest.mark.logger),
        pytest.param(True, id="torchrun"),
    ],
)
def test_ddp_cpu_preset_trains_on_disjoint_shards_and_saves_once(
    tmp_path: Path, torchrun: bool, ddp_runs: DDPRuns
) -> None:
    if torchrun:
        folder = tmp_path
        result = run_train(tmp_path, *DDP_RUN_ARGS, *RANK_PROBE, torchrun_processes=2)
    else:  # the session's ddp-cpu run (the DDP resume test compares its weights with it)
        folder, result = ddp_runs.complete.folder, ddp_runs.complete.result
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]

    ranks = [json.loads((folder / "probe" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["global_rank"] for r in ranks] == [0, 1]
    for rank in ranks:
        assert (rank["world_size"], rank["backend"], rank["strategy"]) == (2, "gloo", "DDPStrategy")
        assert rank["sampler"] == "EpochSampler"  # torch's DistributedSampler, resumable
    # A fair share of the cores each: under Lightning's launcher it sets cores // processes on
    # every rank; torchrun sets OMP_NUM_THREADS=1 unless you set it. Yours always wins.
    share = int(os.environ.get("OMP_NUM_THREADS", max(1, available_cores() // 2)))
    threads = [rank["threads"] for rank in ranks]
    assert threads[0] == threads[1] <= share
    if not torchrun:
        assert threads[0] == share

    size = ranks[0]["train_size"]
    per_rank = math.ceil(size / 2)
    for epoch in ("0", "1"):
        shards = [rank["indices"][epoch] for rank in ranks]
        assert [len(shard) for shard in shards] == [per_rank, per_rank]
        # Disjoint except the padding DistributedSampler adds to even out an odd count.
        assert len(set(shards[0]) & set(shards[1])) == 2 * per_rank - size
        assert set(shards[0]) | set(shards[1]) == set(range(size))
    assert ranks[0]["indices"]["0"] != ranks[0]["indices"]["1"], "reshuffled every epoch"
    # Epoch metrics are synced across processes: every rank logged the same values, and the
    # test metrics count both shards (the test set padded to a multiple of 2).
    assert {"train/loss", "train/acc", "val/loss", "val/acc"} <= ranks[0]["metrics"].keys()
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    padded_test_size = 2 * math.ceil(ranks[0]["test_size"] / 2)
    assert [r["test_samples_total"] for r in ranks] == [padded_test_size] * 2

    # Rank zero alone writes: one run folder, one summary, one "summary:" line.
    assert len(list(folder.glob("runs/**/checkpoints"))) == 1
    summaries = list(folder.glob("runs/**/summary.json"))
    assert len(summaries) == 1
    assert result.stdout.count("summary: ") == 1
    for written in (
        "export/export_report.md",
        "export/model.pt",
        "curves.png",
        "confusion_matrix.png",
    ):
        assert len(list(folder.glob(f"runs/**/{written}"))) == 1, written
    summary = json.loads(summaries[0].read_text())
    assert summary["epochs"] == 2
    # Each optimizer step consumes one batch per process: half the single-process steps.
    assert summary["global_step"] == 2 * math.ceil(per_rank / 64)
