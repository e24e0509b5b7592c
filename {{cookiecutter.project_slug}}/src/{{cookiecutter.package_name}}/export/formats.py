"""Write and read exported models; torch only (predict.py and serving need no Lightning).

    torchscript   fp32 TorchScript (.pt): torch.jit.load in Python, or LibTorch in C++
    int8          int8 dynamic quantization, saved as TorchScript (.int8.pt)
    torch.export  a torch.export program (.pt2) with a dynamic batch: TorchScript's successor
    onnx          ONNX (.onnx), run with onnxruntime; needs the `onnx` extra

Every export takes raw inputs (the standardisation is inside). ``metadata.json`` beside the
files says what a caller feeds it: input shape, class names, how raw inputs were read.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import warnings
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

Predictor = Callable[[torch.Tensor], torch.Tensor]  # raw inputs (B, *shape) -> logits (B, C)

Format = Literal["torchscript", "int8", "torch.export", "onnx"]  # the names in FORMATS
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
METADATA_FILE = "metadata.json"


@dataclass(frozen=True)
class ExportFormat:
    """One export format: its file, how to write and read it, and how it is verified."""

    name: str
    file_name: str
    write: Callable[[nn.Module, torch.Tensor, Path], None]  # eval-mode model, example batch
    read: Callable[[Path, int | None], Predictor]  # path, threads
    exact: bool  # True: logits equal eager's within a tolerance; False: lossy (accuracy)
    requires: tuple[str, ...] = ()  # optional packages it needs


DEFAULT_FORMATS = ["torchscript", "int8", "torch.export"]  # onnx: --export.formats [onnx]


class ExportFormatError(ValueError):
    """An export format that is unknown, or needs packages that are not installed."""


def check_formats(formats: list[str]) -> None:
    """Refuse, before any work, a format that is unknown or cannot be written here."""
    for fmt in formats:
        if fmt not in FORMATS:
            raise ExportFormatError(f"unknown export format {fmt!r}: choose from {list(FORMATS)}.")
        if not all(importlib.util.find_spec(name) for name in FORMATS[fmt].requires):
            raise ExportFormatError(
                f"export format {fmt!r} needs {', '.join(FORMATS[fmt].requires)}: "
                f'pip install -e ".[{fmt}]", or leave it out of export.formats.'
            )


@contextlib.contextmanager
def chosen_deprecated_apis() -> Iterator[None]:
    """Silence, around our own calls only, the deprecations of APIs we use on purpose:
    torch 2.13 deprecates torch.jit and torch.ao.quantization, yet TorchScript is what users
    deploy today and torch.ao's int8 is the fast CPU path (torchao's is slower on CPU)."""
    with warnings.catch_warnings():
        for pattern, category in (
            (r"`torch\.jit\.\w+` is deprecated", DeprecationWarning),
            (r"torch\.ao\.quantization is deprecated", DeprecationWarning),
            (r"torch\.quantize_per_tensor, torch\.quantize_per_channel", UserWarning),
        ):
            warnings.filterwarnings("ignore", message=pattern, category=category)
        yield


def quantize_int8(model: nn.Module) -> nn.Module:
    """int8 weights, activations quantized on the fly: the one place that picks the backend
    (when torchao wins on CPU, this body becomes `torchao.quantization.quantize_`).

    Every nn.Linear is quantized except a first layer that reads the standardised raw inputs,
    where one outlier value stretches the batch's int8 range and blurs every other sample.
    "First": the first layer with weights in registration order. Convolutions stay fp32.
    """
    with_weights = [name for name, m in model.named_modules() if list(m.parameters(False))]
    linears = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    quantized = [name for name in linears if not with_weights or name != with_weights[0]]
    with chosen_deprecated_apis():
        return torch.ao.quantization.quantize_dynamic(
            model, {name: torch.ao.quantization.default_dynamic_qconfig for name in quantized}
        )


def save(model: nn.Module, fmt: str, example: torch.Tensor, path: Path) -> Path:
    """Write ``model`` (eval mode) in format ``fmt``; ``example`` is a (B, *shape) batch."""
    check_formats([fmt])
    model = model.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        FORMATS[fmt].write(model, example, path)
    return path


def _save_int8(model: nn.Module, example: torch.Tensor, path: Path) -> None:
    _save_torchscript(quantize_int8(model), example, path)


def _save_program(model: nn.Module, example: torch.Tensor, path: Path) -> None:
    batch = torch.export.Dim("batch", min=1)
    program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
    torch.export.save(program, path)


def _save_torchscript(model: nn.Module, example: torch.Tensor, path: Path) -> None:
    # Tracing records the eval-mode graph (dropout off); check_trace reruns it on `example`.
    with chosen_deprecated_apis(), warnings.catch_warnings():
        # torch's own F.group_norm checks a size in Python (only a batch of one value per
        # channel fails it), which the tracer reports as a frozen branch. Scoped to torch's
        # functional module: a frozen branch in your network's code still warns.
        warnings.filterwarnings(
            "ignore", category=torch.jit.TracerWarning, module=r"torch\.nn\.functional"
        )
        torch.jit.save(torch.jit.trace(model, example), str(path))


def _save_onnx(model: nn.Module, example: torch.Tensor, path: Path) -> None:
    # The exporter logs a warning per torchvision operator it cannot register: irrelevant here.
    with _log_level("torch.onnx", logging.ERROR):
        torch.onnx.export(
            model,
            (example,),
            str(path),
            dynamo=True,
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            external_data=False,  # one self-contained file, not model.onnx + model.onnx.data
            verbose=False,
        )


@contextlib.contextmanager
def _log_level(name: str, level: int) -> Iterator[None]:
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


def format_of(path: str | Path) -> ExportFormat:
    """The format of an exported file, from the end of its name (.int8.pt before .pt)."""
    name = Path(path).name
    suffixes = {fmt.file_name.removeprefix("model"): fmt for fmt in FORMATS.values()}
    matches = [suffix for suffix in suffixes if name.endswith(suffix)]
    if not matches:
        raise ValueError(
            f"{path}: unknown model file type; expected {', '.join(sorted(suffixes))}."
        )
    return suffixes[max(matches, key=len)]


def load(path: str | Path, threads: int | None = None) -> Predictor:
    """An export read back from disk as a function: raw inputs (B, *shape) -> logits (B, C).
    The format follows the file suffix; ``threads``: onnxruntime's (torch's is per process)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no exported model at {path}: run train.py or the export first.")
    fmt = format_of(path)
    try:
        return fmt.read(path, threads)
    except (RuntimeError, OSError, ValueError, zipfile.BadZipFile) as error:  # truncated, corrupt
        raise ValueError(
            f"cannot load {path} as an exported model ({str(error).splitlines()[0][:200]}): "
            "export it again from its checkpoint."
        ) from None


def _load_torchscript(path: Path, threads: int | None) -> Predictor:
    with chosen_deprecated_apis():
        # torch warns once per process about quantized tensors; if the first one is made
        # inside TorchScript (an int8 model), the warning bypasses Python's filters. Making
        # one here spends that single warning where the filter above catches it.
        torch.quantize_per_tensor(torch.zeros(1), 1.0, 0, torch.qint8)
        return torch.jit.load(str(path), map_location="cpu").eval()


def _load_program(path: Path, threads: int | None) -> Predictor:
    # torch.export.load logs a damaged file before raising; our error says it once, clearly.
    with _log_level("torch.export", logging.CRITICAL):
        return torch.export.load(path).module()


def _load_onnx(path: Path, threads: int | None) -> Predictor:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name

    def predict(x: torch.Tensor) -> torch.Tensor:
        (logits,) = session.run(None, {input_name: x.detach().cpu().numpy()})
        return torch.from_numpy(logits)

    return predict


FORMATS: dict[str, ExportFormat] = {
    fmt.name: fmt
    for fmt in (
        ExportFormat("torchscript", "model.pt", _save_torchscript, _load_torchscript, exact=True),
        ExportFormat("int8", "model.int8.pt", _save_int8, _load_torchscript, exact=False),
        ExportFormat("torch.export", "model.pt2", _save_program, _load_program, exact=True),
        ExportFormat("onnx", "model.onnx", _save_onnx, _load_onnx, True, ONNX_PACKAGES),
    )
}


def write_metadata(
    out_dir: Path,
    input_shape: Sequence[int],
    class_names: Sequence[str],
    preprocessing: dict[str, Any],
    files: dict[str, str],
    data: dict[str, Any] | None = None,
) -> Path:
    """metadata.json: what a caller of the exported files feeds them, and the run's data
    settings (evaluate.py scores an export on its run's test split)."""
    metadata = {
        "task": "classification",
        "input_shape": list(input_shape),
        "class_names": list(class_names),
        "preprocessing": preprocessing,
        "files": files,
        "torch": torch.__version__,
        "data": data,
    }
    path = out_dir / METADATA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metadata, indent=2) + "\n")
    return path


def read_metadata(model_path: str | Path) -> dict[str, Any] | None:
    """The metadata.json beside an exported file, or None (a file exported by hand)."""
    path = Path(model_path).parent / METADATA_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {path} ({error}): export the model again.") from None
