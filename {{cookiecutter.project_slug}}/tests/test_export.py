"""Export: every format round-trips from disk, verification catches drift, train.py exports."""

from __future__ import annotations

import importlib.util
import json
import typing
from pathlib import Path

import pytest
import torch

from {{ cookiecutter.package_name }}.export import formats as artifacts
from {{ cookiecutter.package_name }}.export import verify as export
from {{ cookiecutter.package_name }}.export.verify import (
    ExportVerificationError,
    export_model,
)
from {{ cookiecutter.package_name }}.module import InferenceModel
from {{ cookiecutter.package_name }}.tasks.classification import (
    INT8_MAX_ACCURACY_DROP,
    Classification,
    ClassPriorBias,
)

from .conftest import Run, run_training, run_until_exit
from .networks import KINDS, make_net
from .test_checkpoints import Payload

# Every format this environment can write (onnx with the onnx extra).
FORMATS = [
    name
    for name, fmt in artifacts.FORMATS.items()
    if all(importlib.util.find_spec(package) for package in fmt.requires)
]
DEFAULTS = artifacts.DEFAULT_FORMATS
SHAPE = (1, 8, 8)
TASK = Classification(4, ["a", "b", "c", "d"])


@pytest.fixture(scope="module", params=KINDS)
def model_and_data(
    request: pytest.FixtureRequest,
) -> tuple[InferenceModel, torch.Tensor, torch.Tensor]:
    """A small model of each network kind, with non-trivial input statistics and class
    priors, and labels it mostly gets right."""
    torch.manual_seed(0)
    model = InferenceModel(make_net(request.param, SHAPE, 4), SHAPE, ClassPriorBias(4))
    features = torch.rand(300, *SHAPE) * 16
    model.standardize.set_stats(features.mean().view(1), features.std().view(1))
    model.output.set_priors(torch.tensor([0.4, 0.3, 0.2, 0.1]))
    last = [m for m in model.net.modules() if isinstance(m, torch.nn.Linear)][-1]
    torch.nn.init.normal_(last.weight)  # clear margins, as a trained model has
    with torch.no_grad():
        top2 = model.eval()(features).topk(2, dim=-1)
    clear = top2.values[:, 0] - top2.values[:, 1] > 1.0  # no near-ties for int8 to flip
    return model, features[clear], top2.indices[clear, 0]


def test_every_format_is_one_record() -> None:
    assert set(typing.get_args(artifacts.Format)) == set(artifacts.FORMATS)
    assert set(DEFAULTS) == {"torchscript", "int8", "torch.export"} <= set(FORMATS)
    names = [fmt.file_name for fmt in artifacts.FORMATS.values()]
    assert len(set(names)) == len(names)
    for fmt in artifacts.FORMATS.values():  # a file's format follows from its name
        assert artifacts.format_of(Path("any") / fmt.file_name) is fmt
    with pytest.raises(ValueError, match="unknown model file type"):
        artifacts.format_of("model.h5")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.slow
def test_each_format_round_trips_from_disk_with_any_batch_size(
    fmt: str, model_and_data, tmp_path: Path
) -> None:
    model, features, _ = model_and_data
    path = artifacts.save(
        model.train(), fmt, features[:2], tmp_path / artifacts.FORMATS[fmt].file_name
    )
    loaded = artifacts.load(path)
    with torch.inference_mode():
        expected = model.eval()(features)
        for batch in (features[:1], features[:7], features):  # the batch size is not frozen
            assert loaded(batch).shape == (len(batch), 4)
        got = loaded(features)
    # Saved from train mode on purpose: the export must still be the eval-mode network
    # (dropout off), so two calls agree and fp32 formats equal eager.
    assert torch.equal(got, loaded(features))
    tolerance = 0.5 if fmt == "int8" else TASK.tolerance()[1]
    assert (got - expected).abs().max() <= tolerance


@pytest.mark.slow
def test_export_model_verifies_and_measures_every_format(model_and_data, tmp_path: Path) -> None:
    model, features, labels = model_and_data
    reports = export_model(model, TASK, features, labels, tmp_path, FORMATS)
    assert list(reports) == ["eager", *FORMATS]
    for fmt, report in reports.items():
        assert report.latency_ms["batch_1"] > 0 and report.latency_ms["batch_256"] > 0
        if fmt != "eager":
            assert report.path is not None
            assert Path(report.path).stat().st_size == report.size_bytes
    assert reports["eager"].score == {"accuracy": 1.0}
    assert reports["int8"].score["accuracy"] >= 1.0 - INT8_MAX_ACCURACY_DROP


def test_tampered_torchscript_fails_verification(
    model_and_data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, features, labels = model_and_data
    save = artifacts.save

    def save_then_tamper(*args: typing.Any) -> Path:
        path = save(*args)
        with artifacts.chosen_deprecated_apis():
            scripted = torch.jit.load(str(path))
            with torch.no_grad():
                scripted.output.log_prior.add_(0.01)  # a small edit to the file's numbers
            torch.jit.save(scripted, str(path))
        return path

    monkeypatch.setattr(artifacts, "save", save_then_tamper)
    with pytest.raises(ExportVerificationError, match=r"torchscript export .* differs .* 0\.01"):
        export_model(model, TASK, features, labels, tmp_path, ["torchscript"])


def test_int8_that_loses_accuracy_fails_verification(
    model_and_data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, features, labels = model_and_data
    broken = torch.nn.functional.one_hot((labels + 1) % 4, 4).float()  # always wrong
    monkeypatch.setattr(artifacts, "load", lambda *args, **kwargs: lambda x: broken[: len(x)])
    with pytest.raises(
        ExportVerificationError, match=r"int8 export .* lost \d+\.\d+ points of test accuracy"
    ):
        export_model(model, TASK, features, labels, tmp_path, ["int8"])


@pytest.mark.slow
def test_truncated_artifact_fails_to_load_with_a_clear_message(
    model_and_data, tmp_path: Path
) -> None:
    model, features, _ = model_and_data
    for fmt in ("torchscript", "torch.export"):
        path = artifacts.save(model, fmt, features[:2], tmp_path / artifacts.FORMATS[fmt].file_name)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        with pytest.raises(ValueError, match=r"cannot load .* export it again"):
            artifacts.load(path)


def test_unknown_or_unavailable_format_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unknown export format 'tflite'"):
        artifacts.check_formats(["tflite"])
    monkeypatch.setattr(artifacts.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"onnx.*pip install -e \"\.\[onnx\]\""):
        artifacts.check_formats(["onnx"])


def test_bad_export_format_stops_train_before_training(tmp_path: Path) -> None:
    result = run_until_exit(tmp_path, "--export.formats", "[tflite]")
    assert result.code == 2
    assert "tflite" in result.stderr
    assert not any(tmp_path.rglob("*.ckpt")), "nothing trained, nothing written"


@pytest.mark.slow
def test_train_exports_the_best_checkpoint_and_reports(trained_run: Run) -> None:
    summary = trained_run.summary
    report = Path(summary["paths"]["export_report"])
    assert report.parent == Path(summary["paths"]["run_dir"]) / "export"
    assert list(summary["export"]) == ["eager", *DEFAULTS]
    table = report.read_text()
    for fmt, figures in summary["export"].items():
        assert f"| {fmt} |" in table
        if fmt != "eager":
            assert Path(figures["path"]).is_file()
    eager = summary["export"]["eager"]
    assert eager["accuracy"] == pytest.approx(summary["metrics"]["test/acc"], abs=1e-6)
    assert eager["accuracy"] - summary["export"]["int8"]["accuracy"] <= INT8_MAX_ACCURACY_DROP
    sizes = {fmt: figures["size_bytes"] for fmt, figures in summary["export"].items()}
    assert sizes["int8"] < 0.6 * sizes["torchscript"]  # int8 weights, except the first layer
    assert "speed-up at 256" in table
    assert "predict: python predict.py" in trained_run.stdout
    metadata = json.loads(Path(summary["paths"]["export_metadata"]).read_text())
    assert metadata["input_shape"] == [1, 8, 8]
    assert metadata["class_names"] == [str(digit) for digit in range(10)]
    assert metadata["preprocessing"]["kind"] == "image"
    assert metadata["files"] == {fmt: artifacts.FORMATS[fmt].file_name for fmt in DEFAULTS}
    assert metadata["task"] == "classification"


@pytest.mark.slow
def test_train_exports_the_formats_it_is_given(tmp_path: Path) -> None:
    """A format beyond the defaults, one flag away: exported, verified, on the predict: line."""
    chosen = FORMATS[-1]  # onnx where the onnx extra is installed
    run = run_training(tmp_path, "--trainer.max_epochs", "2", "--export.formats", f"[{chosen}]")
    assert list(run.summary["export"]) == ["eager", chosen]
    exported = sorted(p.name for p in (tmp_path / "runs").rglob("model.*"))
    assert exported == [artifacts.FORMATS[chosen].file_name]
    predict_line = run.stdout.splitlines()[-2]
    path = run.summary["export"][chosen]["path"]
    assert predict_line.startswith(f"predict: python predict.py {path} ")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_export_command_exports_any_checkpoint_in_each_format(
    trained_run: Run, tmp_path: Path, capsys, fmt: str
) -> None:
    checkpoint = trained_run.summary["paths"]["last_checkpoint"]
    export.main(["--ckpt", checkpoint, "--out", str(tmp_path), "--formats", fmt])
    printed = capsys.readouterr().out
    file_name = artifacts.FORMATS[fmt].file_name
    assert f"| {fmt} | {file_name} |" in printed
    assert json.loads(printed[printed.index("{") :])[fmt] == str(tmp_path / file_name)


def test_export_command_refuses_a_pickled_checkpoint(tmp_path: Path, capsys) -> None:
    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": Payload()}, evil)
    with pytest.raises(SystemExit) as exit_info:
        export.main(["--ckpt", str(evil), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "weights-only loading refuses" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
