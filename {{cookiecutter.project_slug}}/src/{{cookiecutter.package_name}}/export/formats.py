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

Predictor = Callable[[torch.Tensor], torch.Tensor]  # raw inputs (B, *shape) -> outputs (B, C)
Format = Literal["torchscript", "int8", "torch.export", "onnx"]  # the names in FORMATS
DEFAULT_FORMATS = ["torchscript", "int8", "torch.export"]  # onnx: --export.formats [onnx]
METADATA_FILE = "metadata.json"


@dataclass(frozen=True)
class ExportFormat:
    name: str
    file_name: str
    exact: bool  # True: outputs equal the model's within a tolerance; False: lossy (int8)
    requires: tuple[str, ...] = ()  # optional packages it needs


FORMATS = {
    fmt.name: fmt
    for fmt in (
        ExportFormat("torchscript", "model.pt", exact=True),
        ExportFormat("int8", "model.int8.pt", exact=False),
        ExportFormat("torch.export", "model.pt2", exact=True),
        ExportFormat("onnx", "model.onnx", True, ("onnx", "onnxscript", "onnxruntime")),
    )
}


class ExportFormatError(ValueError):
    """An export format that is unknown, or needs packages that are not installed."""


def check_formats(formats: Sequence[str]) -> None:
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


@contextlib.contextmanager
def quiet_logger(name: str, level: int) -> Iterator[None]:
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


def quantize_int8(model: nn.Module) -> nn.Module:
    """int8 weights, activations quantized on the fly: the one place that picks the backend
    (when torchao wins on CPU, this body becomes `torchao.quantization.quantize_`). Every
    nn.Linear is quantized but a first layer that reads the standardised raw inputs, where
    one outlier stretches the batch's int8 range and blurs every other sample ("first": in
    registration order). Convolutions stay fp32."""
    with_weights = [name for name, m in model.named_modules() if list(m.parameters(False))]
    linears = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    chosen = [name for name in linears if name != next(iter(with_weights), None)]
    with chosen_deprecated_apis():
        config = torch.ao.quantization.default_dynamic_qconfig
        return torch.ao.quantization.quantize_dynamic(model, dict.fromkeys(chosen, config))


def save(model: nn.Module, fmt: str, example: torch.Tensor, path: Path) -> Path:
    """Write ``model`` (as in eval mode) in format ``fmt``; ``example``: a (B, *shape) batch."""
    check_formats([fmt])
    model = model.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    batch = torch.export.Dim("batch", min=1)
    with torch.no_grad():
        if fmt in ("torchscript", "int8"):
            with chosen_deprecated_apis(), warnings.catch_warnings():
                # torch's own F.group_norm checks a size in Python, which the tracer reports
                # as a frozen branch; scoped to torch, so one in your network still warns.
                warnings.filterwarnings(
                    "ignore", category=torch.jit.TracerWarning, module=r"torch\.nn\.functional"
                )
                traced = quantize_int8(model) if fmt == "int8" else model
                torch.jit.save(torch.jit.trace(traced, example), str(path))
        elif fmt == "torch.export":
            program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
            torch.export.save(program, path)
        else:  # the exporter warns about every torchvision operator it cannot register
            with quiet_logger("torch.onnx", logging.ERROR):
                torch.onnx.export(
                    model,
                    (example,),
                    str(path),
                    dynamo=True,
                    dynamic_shapes=({0: batch},),
                    external_data=False,  # one self-contained file
                    verbose=False,
                )
    return path


def format_of(path: str | Path) -> ExportFormat:
    """The format of an exported file, from the end of its name (.int8.pt before .pt)."""
    suffixes = {fmt.file_name.removeprefix("model"): fmt for fmt in FORMATS.values()}
    matches = [suffix for suffix in suffixes if Path(path).name.endswith(suffix)]
    if not matches:
        raise ValueError(f"{path}: unknown model file type; expected {', '.join(suffixes)}.")
    return suffixes[max(matches, key=len)]


def load(path: str | Path, threads: int | None = None) -> Predictor:
    """An export read back from disk as a function: raw inputs (B, *shape) -> outputs. The
    format follows the file suffix; ``threads``: onnxruntime's (torch's is per process)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no exported model at {path}: run train.py or the export first.")
    fmt = format_of(path).name
    try:
        if fmt == "torch.export":  # it logs a damaged file before raising: our error says it
            with quiet_logger("torch.export", logging.CRITICAL):
                return torch.export.load(path).module()
        if fmt == "onnx":
            return onnx_predictor(path, threads)
        with chosen_deprecated_apis():
            # torch warns once per process about quantized tensors; the first one made inside
            # TorchScript (an int8 model) would bypass Python's filters: spend it here.
            torch.quantize_per_tensor(torch.zeros(1), 1.0, 0, torch.qint8)
            return torch.jit.load(str(path), map_location="cpu").eval()
    except (RuntimeError, OSError, ValueError, zipfile.BadZipFile) as error:  # truncated, corrupt
        raise ValueError(
            f"cannot load {path} as an exported model ({str(error).splitlines()[0][:200]}): "
            "export it again from its checkpoint."
        ) from None


def onnx_predictor(path: Path, threads: int | None) -> Predictor:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: torch.from_numpy(session.run(None, {name: x.detach().cpu().numpy()})[0])


def write_metadata(
    out_dir: Path,
    input_shape: Sequence[int],
    names: Sequence[str],
    preprocessing: dict[str, Any],
    files: dict[str, str],
    data: dict[str, Any] | None = None,
    task: str = "classification",
    target: dict[str, Any] | None = None,
) -> Path:
    """metadata.json: what a caller feeds the exported files and gets back (the class names,
    or the target names and how the model undoes their standardisation), and the run's data
    settings (evaluate.py scores an export on its run's test split)."""
    metadata = {
        "task": task,
        "input_shape": list(input_shape),
        "output_names": list(names),
        **({"class_names": list(names)} if task == "classification" else {"target": target}),
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
