"""serve.py: the real server, started on a free port of 127.0.0.1 and called over HTTP, gives
predict.py's numbers; refuses every bad request with a 4xx and goes on serving; refuses a bad
model before it listens; stops on SIGTERM after the request in flight."""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import predict
import serve
from {{ cookiecutter.package_name }}.data.images import ImageFormat
from {{ cookiecutter.package_name }}.export import formats
from {{ cookiecutter.package_name }}.networks import CNN, MLP
from {{ cookiecutter.package_name }}.runtime import available_cores
from {{ cookiecutter.package_name }}.serve.model import ServedModel

from ..conftest import Run
from ..subprocesses import PROJECT, script_env

pytest.importorskip("fastapi", reason='the serve extra is not installed: pip install -e ".[serve]"')
pytestmark = [pytest.mark.serving]

ROWS_CLASSES = ["cat", "dog", "eel"]
IMAGE = ImageFormat("RGB", (16, 16), invert=False, scale=1.0)
MAX_BATCH, MAX_BODY_MB = 8, 0.05  # small limits, so the tests can go over them


@dataclass
class Server:
    url: str
    model: Path
    process: subprocess.Popen


def export(
    net: torch.nn.Module,
    shape: tuple[int, ...],
    names: list[str],
    kind: dict,
    out: Path,
    task: str = "classification",
) -> Path:
    """A shipped network exported (torch.export) with its metadata.json, as train.py does."""
    torch.manual_seed(0)
    path = formats.save(net.eval(), "torch.export", torch.zeros(2, *shape), out / "model.pt2")
    formats.write_metadata(out, shape, names, kind, {"torch.export": path.name}, task=task)
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(model: Path, *options: str) -> Server:
    port = free_port()
    command = [sys.executable, str(PROJECT / "serve.py"), str(model), "--port", str(port)]
    process = subprocess.Popen(
        [*command, *options],
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return Server(f"http://127.0.0.1:{port}", model, process)


def up(server: Server) -> bool:
    """Whether the server answers GET /health (False while it does not listen)."""
    try:
        return call(server, "GET", "/health") == (200, {"status": "ok"})
    except (urllib.error.URLError, ConnectionError):
        return False


def wait_until_up(server: Server, tries: int = 600) -> None:
    for _ in range(tries):  # 0.2 s apart: torch's import and the model's load take seconds
        if server.process.poll() is not None:
            raise AssertionError(f"the server exited: {server.process.communicate()[0][-3000:]}")
        if up(server):
            return
        time.sleep(0.2)
    raise AssertionError(f"the server did not answer /health in {tries} tries")


def stop(server: Server) -> None:
    """SIGTERM, as a scheduler or `docker stop` sends it: then a clean exit."""
    server.process.send_signal(signal.SIGTERM)
    assert_clean_exit(server)


def assert_clean_exit(server: Server) -> None:
    """uvicorn shut down in order (every process, its app's shutdown included), then ends
    with the signal it got, as its own default handler would (exit code 143 in a shell)."""
    output, _ = server.process.communicate(timeout=60)
    assert server.process.returncode in (0, -signal.SIGTERM), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert output.count("Finished server process") >= 1, output[-3000:]


def call(
    server: Server, method: str, path: str, body: bytes | None = None, content_type: str = ""
) -> tuple[int, Any]:
    """(status, the JSON answer), whatever the status."""
    request = urllib.request.Request(server.url + path, data=body, method=method)
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def post_json(server: Server, payload: Any) -> tuple[int, Any]:
    return call(server, "POST", "/predict", json.dumps(payload).encode(), "application/json")


def post_file(server: Server, name: str, data: bytes) -> tuple[int, Any]:
    """An image as curl -F file=@NAME sends it: a multipart form."""
    boundary = "forge-test-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return call(server, "POST", "/predict", body, f"multipart/form-data; boundary={boundary}")


@pytest.fixture(scope="module")
def servers(trained_run: Run, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The three shipped cases served at once: the trained digits MLP (images, 2 worker
    processes), an MLP on feature rows and a CNN on RGB images; small request limits."""
    out = tmp_path_factory.mktemp("served")
    models = {
        "digits": Path(trained_run.summary["export"]["torch.export"]["path"]),
        "rows": export(
            MLP((5,), 3, hidden_sizes=(16,)),
            (5,),
            ROWS_CLASSES,
            {"kind": "features"},
            out / "rows",
        ),
        "image": export(
            CNN(IMAGE.shape, 3, channels=(4, 8), pool_size=2),
            IMAGE.shape,
            ["red", "green", "blue"],
            IMAGE.to_dict(),
            out / "image",
        ),
        "regression": export(
            MLP((5,), 2, hidden_sizes=(16,)),
            (5,),
            ["price", "count"],
            {"kind": "features"},
            out / "regression",
            task="regression",
        ),
    }
    limits = ("--max-batch", str(MAX_BATCH), "--max-body-mb", str(MAX_BODY_MB))
    started = {
        name: start_server(path, *limits, *(["--workers", "2"] if name == "digits" else []))
        for name, path in models.items()
    }
    try:
        for server in started.values():
            wait_until_up(server)
        yield started
    finally:
        for server in started.values():
            if server.process.poll() is None:
                stop(server)  # a clean exit on SIGTERM, 2 worker processes included


def probabilities_by_predict_py(model: Path, inputs: Path) -> list[dict[str, float]]:
    names = json.loads((model.parent / "metadata.json").read_text())["output_names"]
    predictions = predict.predict(model, [inputs], top=len(names))
    return [dict(zip(p.classes, p.probabilities, strict=True)) for p in predictions]


def assert_same_numbers(answer: dict, expected: list[dict[str, float]]) -> None:
    assert len(answer["predictions"]) == len(expected)
    for served, reference in zip(answer["predictions"], expected, strict=True):
        assert served["probabilities"].keys() == reference.keys()
        for name, value in reference.items():
            assert served["probabilities"][name] == pytest.approx(value, abs=1e-6)
        assert served["class"] == max(reference, key=reference.__getitem__)
        assert served["probability"] == pytest.approx(max(reference.values()), abs=1e-6)


def rows(count: int) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(count, 5)).astype(np.float32)


def png(path: Path, size: tuple[int, int] = (20, 12), seed: int = 0) -> Path:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(*size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


@pytest.mark.slow
def test_rows_get_predict_py_numbers_one_or_a_batch(servers: dict, tmp_path: Path) -> None:
    server, batch = servers["rows"], rows(4)
    np.savetxt(tmp_path / "rows.csv", batch, delimiter=",")
    expected = probabilities_by_predict_py(server.model, tmp_path / "rows.csv")
    status, answer = post_json(server, {"inputs": batch.tolist()})
    assert status == 200, answer
    assert_same_numbers(answer, expected)
    status, answer = post_json(server, {"input": batch[0].tolist()})
    assert status == 200, answer
    assert_same_numbers(answer, expected[:1])


@pytest.mark.slow
def test_images_get_predict_py_numbers_as_a_file_or_as_json(servers: dict, tmp_path: Path) -> None:
    server = servers["image"]
    image = png(tmp_path / "photo.png")  # 20 x 12: resized as training would
    expected = probabilities_by_predict_py(server.model, image)
    status, answer = post_file(server, image.name, image.read_bytes())
    assert status == 200, answer
    assert_same_numbers(answer, expected)
    status, answer = call(server, "POST", "/predict", image.read_bytes(), "image/png")
    assert status == 200, answer
    assert_same_numbers(answer, expected)


@pytest.mark.slow
def test_the_trained_digits_model_answers_like_predict_py(
    servers: dict, trained_run: Run, tmp_path: Path
) -> None:
    """The trained MLP, served by two worker processes: digit images as JSON arrays."""
    from sklearn.datasets import load_digits

    server = servers["digits"]
    digits = load_digits().images[:6].astype(np.float32)  # raw 0-16 pixels, as in training
    np.save(tmp_path / "digits.npy", digits[:, None])
    expected = probabilities_by_predict_py(server.model, tmp_path / "digits.npy")
    status, answer = post_json(server, {"inputs": digits[:, None].tolist()})
    assert status == 200, answer
    assert_same_numbers(answer, expected)


@pytest.mark.slow
def test_every_export_format_is_served_with_predict_py_numbers(
    trained_run: Run, tmp_path: Path
) -> None:
    """TorchScript, int8, torch.export (and ONNX where its extra is installed) of the trained
    run, through the server's model (HTTP adds nothing per format: the tests above)."""
    from sklearn.datasets import load_digits

    digits = load_digits().images[:6].astype(np.float32)[:, None]
    np.save(tmp_path / "digits.npy", digits)
    body = json.dumps({"inputs": digits.tolist()}).encode()
    exports = {k: v for k, v in trained_run.summary["export"].items() if k != "eager"}
    assert {"torchscript", "int8", "torch.export"} <= exports.keys()
    for fmt, figures in exports.items():
        path = Path(figures["path"])
        model = ServedModel(path)  # no threads given: the test process keeps its own
        assert model.format == fmt
        expected = probabilities_by_predict_py(path, tmp_path / "digits.npy")
        assert_same_numbers(model.predict(model.samples_from_json(body)), expected)


@pytest.mark.slow
def test_the_server_imports_no_lightning(trained_run: Run) -> None:
    """serve.py loads, builds its app and answers with torch, FastAPI and the package's
    serving modules only: no training code in a server."""
    code = (
        "import sys, json, uvicorn, serve\n"
        "from {{ cookiecutter.package_name }}.serve.app import create_app\n"
        "settings = {'model': sys.argv[1], 'max_batch': 64, 'max_body_mb': 4, 'workers': 1}\n"
        "model = serve.load_model(settings)\n"
        "create_app(model)\n"
        "print(model.predict(model.samples_from_json(json.dumps({'input': [0] * 64}).encode())))\n"
        "assert not [m for m in sys.modules if m.startswith(('lightning', 'pytorch_lightning'))]"
    )
    model = trained_run.summary["export"]["torch.export"]["path"]
    result = subprocess.run(
        [sys.executable, "-c", code, model], env=script_env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "'predictions'" in result.stdout, result.stdout


@pytest.mark.slow
def test_health_and_metadata_answer(servers: dict) -> None:
    for name, server in servers.items():
        assert call(server, "GET", "/health") == (200, {"status": "ok"})
        status, metadata = call(server, "GET", "/metadata")
        assert status == 200
        assert metadata["model"] == str(server.model.resolve())
        assert metadata["format"] == "torch.export"
        assert metadata["limits"]["max_batch"] == MAX_BATCH
        assert {"torch", "fastapi", "uvicorn", "python"} <= metadata["versions"].keys()
        assert ("image/*" in metadata["accepts"]) == (name in ("digits", "image"))
        # the cores are split between the worker processes, not oversubscribed
        workers = 2 if name == "digits" else 1
        assert metadata["threads"] == max(1, available_cores() // workers)
    assert call(servers["rows"], "GET", "/metadata")[1]["classes"] == ROWS_CLASSES
    assert call(servers["rows"], "GET", "/metadata")[1]["input_shape"] == [5]


ROW = [0.5, 1.0, -1.0, 2.0, 0.0]
BAD_REQUESTS: dict[str, tuple[str, bytes, str, int, str]] = {
    # name: (server, body, content type, status, a fragment of the error)
    "not-json": ("rows", b"{inputs: [1, 2", "application/json", 400, "not JSON"),
    "wrong-key": ("rows", b'{"samples": [[1, 2, 3, 4, 5]]}', "application/json", 422, "one key"),
    "two-keys": ("rows", b'{"input": [1], "inputs": [[1]]}', "application/json", 422, "one key"),
    "not-a-list": ("rows", b'{"inputs": 3}', "application/json", 422, "non-empty list"),
    "empty-batch": ("rows", b'{"inputs": []}', "application/json", 422, "non-empty list"),
    "features": ("rows", b'{"inputs": [[1, 2, 3]]}', "application/json", 422, "(5,)"),
    "shape": ("image", b'{"inputs": [[[1, 2], [3, 4]]]}', "application/json", 422, "(3, 16, 16)"),
    "nan": ("rows", b'{"input": [NaN, 1, 2, 3, 4]}', "application/json", 422, "NaN or inf"),
    "inf": ("rows", b'{"input": [1e999, 1, 2, 3, 4]}', "application/json", 422, "NaN or inf"),
    "big": ("rows", b'{"input": [1e300, 1, 2, 3, 4]}', "application/json", 422, "NaN or inf"),
    "strings": ("rows", b'{"input": ["1", 2, 3, 4, 5]}', "application/json", 422, "text"),
    "null": ("rows", b'{"input": [null, 2, 3, 4, 5]}', "application/json", 422, "null"),
    "booleans": ("rows", b'{"input": [true, 2, 3, 4, 5]}', "application/json", 422, "true/false"),
    "ragged": ("rows", b'{"inputs": [[1, 2, 3, 4, 5], [1]]}', "application/json", 422, "ragged"),
    "over-batch": (
        "rows",
        json.dumps({"inputs": [ROW] * (MAX_BATCH + 1)}).encode(),
        "application/json",
        413,
        f"over the limit of {MAX_BATCH}",
    ),
    "over-size": (
        "rows",
        b'{"input": [' + b" " * int(MAX_BODY_MB * 2**20) + b"1, 2, 3, 4, 5]}",
        "application/json",
        413,
        "bytes",
    ),
    "bad-image": ("image", b"GIF89a not really", "image/png", 422, "not a PNG, JPEG or BMP"),
    "image-to-rows": ("rows", b"\x89PNG", "image/png", 415, "feature rows, not images"),
    "content-type": ("rows", b"1,2,3,4,5", "text/csv", 415, "Content-Type"),
    "no-file-field": (
        "image",
        b'--b\r\nContent-Disposition: form-data; name="photo"\r\n\r\nx\r\n--b--\r\n',
        "multipart/form-data; boundary=b",
        422,
        'form field "file"',
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_a_bad_request_gets_a_4xx_naming_it_and_the_server_goes_on(
    servers: dict, name: str
) -> None:
    which, body, content_type, status, fragment = BAD_REQUESTS[name]
    server = servers[which]
    answer = call(server, "POST", "/predict", body, content_type)
    assert answer[0] == status, answer
    assert fragment in answer[1]["error"], answer
    assert call(server, "GET", "/health") == (200, {"status": "ok"})
    good = {"input": ROW} if which == "rows" else {"input": np.zeros(IMAGE.shape).tolist()}
    assert post_json(server, good)[0] == 200


@pytest.mark.slow
def test_an_undecodable_uploaded_image_is_refused(servers: dict) -> None:
    status, answer = post_file(servers["image"], "broken.png", b"\x89PNG\r\n\x1a\n broken")
    assert status == 422
    assert answer["error"].startswith("cannot read broken.png as an image")


@pytest.mark.parametrize(
    ("make_model", "message"),
    [
        (lambda d: d / "missing.pt2", "no exported model at"),
        (lambda d: _write(d / "model.pt2", b"not a model"), "cannot load"),
        (lambda d: _write(d / "model.txt", b"x"), "unknown model file type"),
        (lambda d: _write(d / "elsewhere" / "model.pt2", b"x"), "no metadata.json beside it"),
    ],
    ids=["missing", "corrupt", "wrong-format", "no-metadata"],
)
def test_a_bad_model_is_refused_in_one_line_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_model: Any, message: str
) -> None:
    formats.write_metadata(tmp_path, (5,), ROWS_CLASSES, {"kind": "features"}, {})
    with pytest.raises(SystemExit) as exit:
        serve.main([str(make_model(tmp_path)), "--port", str(free_port())])
    assert exit.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and message in line


def test_a_model_of_another_shape_is_refused_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """metadata.json says 7 features; the model takes 5."""
    export(MLP((5,), 3), (5,), ROWS_CLASSES, {"kind": "features"}, tmp_path)
    formats.write_metadata(tmp_path, (7,), ROWS_CLASSES, {"kind": "features"}, {})
    with pytest.raises(SystemExit) as exit:
        serve.main([str(tmp_path / "model.pt2"), "--port", str(free_port())])
    assert exit.value.code == 2
    assert "does not run on inputs of shape (7,)" in capsys.readouterr().err


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.slow
def test_sigterm_stops_after_the_request_in_flight(servers: dict) -> None:
    """Half a request is sent, then SIGTERM; once the server no longer listens, the rest: it
    is answered, then the server exits cleanly. Last: it stops the rows server."""
    server = servers["rows"]
    body = json.dumps({"input": ROW}).encode()
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        head = (
            f"POST /predict HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        connection.sendall(head + body[:5])
        assert up(server)  # answered after the server read the half request sent before it
        server.process.send_signal(signal.SIGTERM)
        for _ in range(300):  # until it shuts down: its listening socket closed
            if not up(server):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the server still listens after SIGTERM")
        connection.sendall(body[5:])
        answer = connection.makefile("rb").read()
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 200"), answer[:500]
    payload = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert math.isclose(sum(payload["predictions"][0]["probabilities"].values()), 1, rel_tol=1e-5)
    assert_clean_exit(server)
    assert not up(server)


def test_a_regression_is_answered_with_predict_pys_values(servers: dict, tmp_path: Path) -> None:
    server = servers["regression"]
    inputs = tmp_path / "rows.npy"
    np.save(inputs, rows(4))
    status, answer = post_json(server, {"inputs": rows(4).tolist()})
    assert status == 200, answer
    expected = [p.values for p in predict.predict(server.model, [inputs])]
    for served, reference in zip(answer["predictions"], expected, strict=True):
        assert reference is not None and served["values"] == pytest.approx(reference, abs=1e-5)
    metadata = call(server, "GET", "/metadata")[1]
    assert (metadata["task"], metadata["targets"]) == ("regression", ["price", "count"])
