"""Checkpoints: weights-only loading, clear errors for bad files, resume, transfer learning."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch

from {{ cookiecutter.package_name }}.networks import MLP
from {{ cookiecutter.package_name }}.training.checkpoints import (
    AtomicCheckpointIO,
    CheckpointError,
    load_weights,
    read_checkpoint,
    resolve_ckpt_path,
)

from .conftest import CONFIGS, Run, assert_one_logger_run, run_training, run_until_exit


class Payload:
    """Any class: unpickling it means running code chosen by whoever wrote the file."""


def test_checkpoint_carrying_a_pickled_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "extra": Payload()}, path)
    with pytest.raises(CheckpointError, match="weights-only loading refuses"):
        read_checkpoint(path)


@pytest.mark.slow
def test_truncated_checkpoint_fails_with_a_clear_message(trained_run: Run, tmp_path: Path) -> None:
    source = Path(trained_run.summary["paths"]["last_checkpoint"])
    broken = tmp_path / "last.ckpt"
    broken.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        read_checkpoint(broken)


def test_atomic_writer_replaces_whole_files_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    writer = AtomicCheckpointIO()
    writer.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, path)
    writer.save_checkpoint({"state_dict": {"w": torch.zeros(3)}}, path)
    assert torch.equal(read_checkpoint(path)["state_dict"]["w"], torch.zeros(3))
    # A write that fails half-way (here: an unpicklable object) keeps the previous file.
    with pytest.raises(Exception):  # noqa: B017 - whatever pickle raises
        writer.save_checkpoint({"state_dict": {}, "bad": lambda: None}, path)
    assert torch.equal(read_checkpoint(path)["state_dict"]["w"], torch.zeros(3))
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]


def test_missing_checkpoint_and_missing_last_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        resolve_ckpt_path(str(tmp_path / "nope.ckpt"), tmp_path)
    with pytest.raises(CheckpointError, match="train once first"):
        resolve_ckpt_path("last", tmp_path)
    assert resolve_ckpt_path(None, tmp_path) is None


@pytest.mark.slow
def test_last_resolves_to_the_newest_last_checkpoint(trained_run: Run) -> None:
    runs = Path(trained_run.summary["paths"]["run_dir"]).parent.parent
    found = resolve_ckpt_path("last", runs)
    assert found is not None and Path(found) == Path(
        trained_run.summary["paths"]["last_checkpoint"]
    )


@pytest.mark.slow
def test_load_weights_reports_missing_and_unexpected_keys(
    trained_run: Run, caplog: pytest.LogCaptureFixture
) -> None:
    wider_head = MLP(num_outputs=12)  # a new task: the head does not fit
    with caplog.at_level(logging.INFO):
        load_weights(wider_head, trained_run.summary["paths"]["best_checkpoint"])
    assert "loaded 4 tensors" in caplog.text
    assert "of another shape in the checkpoint (left as initialised): head.weight, head.bias" in (
        caplog.text
    )
    same = MLP()
    load_weights(same, trained_run.summary["paths"]["best_checkpoint"])
    state = read_checkpoint(trained_run.summary["paths"]["best_checkpoint"])["state_dict"]
    assert torch.equal(same.state_dict()["body.0.weight"], state["model.net.body.0.weight"])
    assert torch.equal(wider_head.state_dict()["body.0.weight"], state["model.net.body.0.weight"])


@pytest.mark.slow
# A moved runs/ folder resumes too: checkpoints record relative folders.
@pytest.mark.filterwarnings("error:The dirpath has changed")
@pytest.mark.logger
def test_train_resumes_from_last_in_the_same_run_folder(tmp_path: Path, trained_run: Run) -> None:
    run_root = Path(trained_run.summary["paths"]["run_dir"]).parent.parent
    # symlinks=True: wandb's folder holds links to its latest logs, which may dangle.
    shutil.copytree(run_root, tmp_path / "runs", symlinks=True)
    copied_run = tmp_path / Path(trained_run.summary["paths"]["run_dir"]).relative_to(
        Path(trained_run.summary["paths"]["run_dir"]).parent.parent.parent
    )
    run = run_training(
        tmp_path, "--trainer.max_epochs", "27", "--ckpt_path", "last", "--export.formats", "[]"
    )
    assert run.summary["epochs"] == 27
    assert run.summary["global_step"] == trained_run.summary["global_step"] + 2 * 20
    assert run.summary["paths"]["run_dir"] == str(copied_run.resolve())
    # The best epoch so far was remembered: no second best-*.ckpt unless a better one came.
    best = sorted(p.name for p in (copied_run / "checkpoints").glob("best-*.ckpt"))
    assert len(best) == 1, best
    # And it logged into the same logger run: no second version, the curves go on, no step
    # twice (the first run's final test, at the step the resume starts from, is dropped).
    assert_one_logger_run(copied_run, run.stdout, epochs=27, steps_per_epoch=20)


@pytest.mark.slow
def test_bad_ckpt_path_stops_before_training_with_exit_code_2(tmp_path: Path) -> None:
    result = run_until_exit(tmp_path, "--ckpt_path", "missing.ckpt")
    assert result.code == 2
    assert "error: checkpoint missing.ckpt does not exist" in result.stderr
    assert not any(tmp_path.rglob("*.ckpt")), "nothing trained, nothing written"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer.max_epochs", "20"], "has already trained 25 epochs and trainer.max_epochs"),
        (["--model.net.init_args.hidden_sizes", "[32]"], "of another network or data shape"),
        (["--config", "{configs}/cnn.yaml"], "of another network or data shape"),
    ],
    ids=["past-max-epochs", "other-width", "other-network"],
)
def test_a_resume_that_cannot_work_is_refused_before_training(
    tmp_path: Path, trained_run: Run, args: list[str], message: str
) -> None:
    last = trained_run.summary["paths"]["last_checkpoint"]
    args = [arg.format(configs=CONFIGS) for arg in args]
    result = run_until_exit(tmp_path, "--ckpt_path", last, *args)
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: checkpoint ") and message in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_weights_only_best_checkpoint_is_not_a_resume_point(
    tmp_path: Path, trained_run: Run
) -> None:
    best = trained_run.summary["paths"]["best_checkpoint"]
    result = run_until_exit(tmp_path, "--ckpt_path", best)
    assert result.code == 2 and "holds weights only" in result.stderr
