"""Export: every format round-trips from disk, verification catches drift, train.py exports."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
import torch

from {{ cookiecutter.package_name }} import artifacts, export
from {{ cookiecutter.package_name }}.export import (
    FP32_TOLERANCE,
    INT8_MAX_ACCURACY_DROP,
    ExportVerificationError,
    export_model,
    verify_artifact,
)
from {{ cookiecutter.package_name }}.model import MLPClassifier

from .conftest import Run, run_until_exit
from .test_checkpoints import Payload

FORMATS = artifacts.available_formats()


@pytest.fixture(scope="module")
def model_and_data() -> tuple[MLPClassifier, torch.Tensor, torch.Tensor]:
    """A small model with non-trivial input statistics, and labels it mostly gets right."""
    torch.manual_seed(0)
    model = MLPClassifier(in_features=16, num_classes=4, hidden_sizes=(32,), dropout=0.5)
    features = torch.rand(300, 16) * 16
    model.set_input_stats(features.mean(0), features.std(0))
    torch.nn.init.normal_(model.head.weight)  # clear margins, as a trained model has
    with torch.no_grad():
        top2 = model.eval()(features).topk(2, dim=-1)
    clear = top2.values[:, 0] - top2.values[:, 1] > 1.0  # no near-ties for int8 to flip
    return model, features[clear], top2.indices[clear, 0]


def test_every_format_name_has_a_file_name() -> None:
    assert set(typing.get_args(artifacts.Format)) == set(artifacts.FILE_NAMES)
    assert {"torchscript", "int8", "torch.export"} <= set(FORMATS)


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_round_trips_from_disk_with_any_batch_size(
    fmt: str, model_and_data, tmp_path: Path
) -> None:
    model, features, _ = model_and_data
    path = artifacts.save(model.train(), fmt, features[:2], tmp_path / artifacts.FILE_NAMES[fmt])
    loaded = artifacts.load(path)
    with torch.inference_mode():
        expected = model.eval()(features)
        for batch in (features[:1], features[:7], features):  # the batch size is not frozen
            assert loaded(batch).shape == (len(batch), 4)
        got = loaded(features)
    # Saved from train mode on purpose: the export must still be the eval-mode network
    # (dropout off), so two calls agree and fp32 formats equal eager.
    assert torch.equal(got, loaded(features))
    tolerance = 0.5 if fmt == "int8" else FP32_TOLERANCE
    assert (got - expected).abs().max() <= tolerance


def test_export_model_verifies_and_measures_every_format(model_and_data, tmp_path: Path) -> None:
    model, features, labels = model_and_data
    reports = export_model(model, features, labels, tmp_path, FORMATS)
    assert list(reports) == ["eager", *FORMATS]
    for fmt, report in reports.items():
        assert report.latency_ms["batch_1"] > 0 and report.latency_ms["batch_256"] > 0
        if fmt != "eager":
            assert Path(report.path).stat().st_size == report.size_bytes
    assert reports["eager"].accuracy == 1.0
    assert reports["int8"].accuracy >= 1.0 - INT8_MAX_ACCURACY_DROP


def test_tampered_torchscript_fails_verification(model_and_data, tmp_path: Path) -> None:
    model, features, labels = model_and_data
    path = artifacts.save(model, "torchscript", features[:2], tmp_path / "model.pt")
    with artifacts.chosen_deprecated_apis():
        scripted = torch.jit.load(str(path))
        with torch.no_grad():
            scripted.head.bias.add_(0.01)  # a small edit to the file's weights
        torch.jit.save(scripted, str(path))
    with torch.inference_mode():
        eager_logits = model.eval()(features)
    with pytest.raises(ExportVerificationError, match=r"torchscript export .* differs .* 0\.01"):
        verify_artifact("torchscript", path, features, labels, eager_logits)


def test_int8_that_loses_accuracy_fails_verification(
    model_and_data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, features, labels = model_and_data
    path = artifacts.save(model, "int8", features[:2], tmp_path / "model.int8.pt")
    broken = torch.zeros(len(features), 4)  # always class 0
    monkeypatch.setattr(
        export.artifacts, "load", lambda *args, **kwargs: lambda x: broken[: len(x)]
    )
    with torch.inference_mode():
        eager_logits = model.eval()(features)
    with pytest.raises(
        ExportVerificationError, match=r"int8 export .* lost \d+\.\d+ points of test accuracy"
    ):
        verify_artifact("int8", path, features, labels, eager_logits)


def test_truncated_artifact_fails_to_load_with_a_clear_message(
    model_and_data, tmp_path: Path
) -> None:
    model, features, _ = model_and_data
    for fmt in ("torchscript", "torch.export"):
        path = artifacts.save(model, fmt, features[:2], tmp_path / artifacts.FILE_NAMES[fmt])
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
    assert list(summary["export"]) == ["eager", *FORMATS]
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


@pytest.mark.slow
def test_export_command_exports_any_checkpoint(trained_run: Run, tmp_path: Path, capsys) -> None:
    checkpoint = trained_run.summary["paths"]["last_checkpoint"]
    export.main(["--ckpt", checkpoint, "--out", str(tmp_path), "--formats", "torchscript"])
    printed = capsys.readouterr().out
    assert "| torchscript | model.pt |" in printed
    assert json.loads(printed[printed.index("{") :])["torchscript"] == str(tmp_path / "model.pt")


def test_export_command_refuses_a_pickled_checkpoint(tmp_path: Path, capsys) -> None:
    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": Payload()}, evil)
    with pytest.raises(SystemExit) as exit_info:
        export.main(["--ckpt", str(evil), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "weights-only loading refuses" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
