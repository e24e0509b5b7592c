"""The model behind serve.py, whatever the web framework: an export and its metadata.json,
each request checked and turned into samples, answers with predict.py's numbers. Needs torch,
numpy and Pillow, not Lightning: a server imports no training code.
"""

from __future__ import annotations

import contextlib
import io
import json
import platform
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data.images import ImageError, read_image
from ..export.formats import format_of, load, read_metadata
from ..export.inputs import InputError, ModelInputs, finite

JSON_FORM = '{"inputs": [sample, ...]}'
VERSIONED = ("torch", "numpy", "pillow", "fastapi", "uvicorn", "onnxruntime")
NOT_NUMBERS = {bool: "true/false", str: "text", type(None): "null", dict: "objects"}


class RequestError(ValueError):
    """A request the model cannot answer: the message names the problem and the fix;
    ``status`` is the 4xx HTTP status to answer with."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """What one request may hold: bounds on the work and memory a client can ask for."""

    max_batch: int = 64  # samples per request
    max_body_bytes: int = 4 * 2**20  # the request body (JSON or an image)


class ServedModel:
    """An export (.pt2, TorchScript, int8; ONNX with its extra) ready to answer requests.

    A file that is missing, corrupt, of an unknown type, without its metadata.json, or that
    does not run on the input shape its metadata gives raises FileNotFoundError or ValueError
    in one line naming the fix: a server must refuse it before it listens."""

    def __init__(self, path: Path, limits: Limits | None = None, threads: int | None = None):
        self.path = Path(path)
        self.limits = limits or Limits()
        self.format = format_of(self.path).name
        if not self.path.is_file():
            raise FileNotFoundError(f"no exported model at {self.path}: run train.py first.")
        metadata = read_metadata(self.path)
        if metadata is None:
            raise ValueError(
                f"{self.path}: no metadata.json beside it (input shape, class names): serve a "
                "model from a run's export/ folder, as train.py wrote it."
            )
        self.metadata = metadata
        self.inputs = ModelInputs.beside(self.path)
        self.input_shape: tuple[int, ...] = self.inputs.input_shape or ()
        self.output_names: list[str] = self.inputs.output_names or []
        if threads:  # torch's count is per process; load() sets onnxruntime's
            torch.set_num_threads(threads)  # --workers share the cores, not oversubscribe
        self.predictor = load(self.path, threads)
        try:  # once, at start-up: a model of another shape fails here, not on a request
            self.predict(np.zeros((1, *self.input_shape), dtype=np.float32))
        except (RuntimeError, AssertionError) as error:  # (torch.export's shape guards)
            raise ValueError(
                f"{self.path} does not run on inputs of shape {self.input_shape} "
                f"({str(error).splitlines()[0][:200]}): export it again from its checkpoint."
            ) from None

    def describe(self) -> dict[str, Any]:
        """GET /metadata: the file, its format, what it takes and returns, the versions."""
        versions = {"python": platform.python_version()}
        for name in VERSIONED:
            with contextlib.suppress(PackageNotFoundError):
                versions[name] = version(name)
        return {
            "model": str(self.path.resolve()),
            "format": self.format,
            "input_shape": list(self.input_shape),
            "task": self.inputs.task,
            "classes" if self.inputs.task == "classification" else "targets": self.output_names,
            "preprocessing": self.metadata.get("preprocessing", {}),
            "accepts": ["application/json"] + (["image/*"] if self.inputs.image else []),
            "limits": asdict(self.limits),
            "threads": torch.get_num_threads(),  # this process's (one of --workers)
            "exported_with_torch": self.metadata.get("torch"),
            "versions": versions,
        }

    def samples_from_json(self, body: bytes) -> np.ndarray:
        """(N, *input_shape) float32 from ``{"inputs": [sample, ...]}`` or ``{"input": sample}``;
        a sample is nested lists of numbers of the input shape, or a flat list of its size."""
        try:
            payload = json.loads(body, parse_int=float)  # a huge integer: inf, not an error
        except (ValueError, UnicodeDecodeError) as error:
            raise RequestError(f"the body is not JSON ({error}): send {JSON_FORM}", 400) from None
        keys = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
        if keys not in (["input"], ["inputs"]):
            raise RequestError(f'expected one key, "inputs" or "input" (one sample), got {keys}')
        samples = [payload["input"]] if "input" in payload else payload["inputs"]
        if not isinstance(samples, list) or not samples:
            raise RequestError('"inputs" must be a non-empty list of samples')
        if len(samples) > self.limits.max_batch:
            raise RequestError(
                f"{len(samples)} samples, over the limit of {self.limits.max_batch} a request: "
                "send smaller batches (or start serve.py with a larger --max-batch)",
                413,
            )
        found = _not_a_number(samples)
        if found is None:
            try:
                with np.errstate(over="ignore"):  # beyond float32's range: inf, refused below
                    array = np.asarray(samples, dtype=np.float32)
            except ValueError:
                found = "ragged lists"
        if found is not None:
            raise RequestError(
                "every sample must be nested lists of numbers, of the same length at each "
                f"level (found {found}); the model takes samples of shape {self.input_shape}"
            )
        try:
            return finite(self.inputs.shape_rows(array, "inputs"), "inputs")
        except InputError as error:
            raise RequestError(str(error)) from None

    def samples_from_image(self, data: bytes, name: str) -> np.ndarray:
        """(1, *input_shape) float32 from an image file's bytes, read as the training images
        were (metadata.json: colour mode, size, scaling)."""
        if self.inputs.image is None:
            raise RequestError(f"the model takes feature rows, not images: send {JSON_FORM}", 415)
        try:
            return read_image(io.BytesIO(data), self.inputs.image, name)[None]
        except ImageError as error:
            raise RequestError(str(error)) from None

    def predict(self, samples: np.ndarray) -> dict[str, Any]:
        """Per sample, predict.py's numbers: the most probable class and every class's
        probability, or each regression target's value (in its units)."""
        with torch.inference_mode():
            outputs = self.predictor(torch.from_numpy(samples)).float()
        if self.inputs.task == "regression":
            values = [dict(zip(self.output_names, r, strict=True)) for r in outputs.tolist()]
            return {"predictions": [{"values": row} for row in values]}
        predictions = []
        for row in outputs.softmax(dim=-1).tolist():
            probs = dict(zip(self.output_names, row, strict=True))
            best = max(probs, key=probs.__getitem__)
            predictions.append({"class": best, "probability": probs[best], "probabilities": probs})
        return {"predictions": predictions}


def _not_a_number(values: list[Any]) -> str | None:
    """What a leaf of nested lists is if not a number (json.loads gave every number as a
    float: JSON true is no 1)."""
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
        elif not isinstance(value, float):
            return NOT_NUMBERS.get(type(value), type(value).__name__)
    return None
