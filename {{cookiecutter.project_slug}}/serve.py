"""Serve an exported model over HTTP: the serve extra (pip install -e ".[serve]"), no Lightning.

To run:
    python serve.py runs/.../export/model.pt2                 # http://127.0.0.1:8000
    python serve.py runs/.../export/model.pt --port 9000 --workers 2
    curl -s localhost:8000/predict -H 'Content-Type: application/json' -d @sample.json
    curl -s localhost:8000/predict -F file=@digit.png          # image models

POST /predict, GET /health, GET /metadata (and the OpenAPI page at /docs). A bad model is
refused in one line (exit code 2) before the server listens; SIGTERM or Ctrl-C stops it after
the requests in flight.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from {{ cookiecutter.package_name }}.runtime import available_cores
from {{ cookiecutter.package_name }}.serve.model import Limits, ServedModel

# --workers > 1: uvicorn starts each worker from an import string; the settings go by this.
SETTINGS_VARIABLE = "SERVE_SETTINGS"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("model", type=Path, help="an exported model: .pt2, .pt, .int8.pt, .onnx")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to listen on every network")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1, help="server processes (one per core)")
    parser.add_argument("--max-batch", type=int, default=Limits.max_batch, help="samples/request")
    parser.add_argument(
        "--max-body-mb", type=float, default=Limits.max_body_bytes / 2**20, help="request size"
    )
    parser.add_argument("--access-log", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    for name in ("workers", "max_batch", "max_body_mb"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def load_model(settings: dict[str, Any]) -> ServedModel:
    limits = Limits(settings["max_batch"], int(settings["max_body_mb"] * 2**20))
    threads = max(1, available_cores() // settings["workers"])
    return ServedModel(Path(settings["model"]), limits, threads)


def app_from_settings() -> Any:
    """uvicorn's factory in each worker process (--workers > 1)."""
    from {{ cookiecutter.package_name }}.serve.app import create_app

    return create_app(load_model(json.loads(os.environ[SETTINGS_VARIABLE])))


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            raise ValueError(f"cannot listen on {host}:{port} ({error.strerror}): --port") from None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = vars(args) | {"model": str(args.model)}
    try:
        import uvicorn

        from {{ cookiecutter.package_name }}.serve.app import create_app
    except ImportError as error:
        print(f'error: {error.name} is missing: pip install -e ".[serve]"', file=sys.stderr)
        raise SystemExit(2) from None
    try:
        model = load_model(settings)  # refused here, in one line, before the server starts
        check_port_free(args.host, args.port)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    noun = "classes" if model.inputs.task == "classification" else "targets"
    print(
        f"serving {model.path} ({model.format}, inputs of shape {model.input_shape}, "
        f"{len(model.output_names)} {noun}) on http://{args.host}:{args.port}",
        flush=True,
    )
    os.environ[SETTINGS_VARIABLE] = json.dumps(settings)  # read by each of --workers > 1
    many = args.workers > 1
    uvicorn.run(
        "serve:app_from_settings" if many else create_app(model),
        factory=many,
        workers=args.workers,
        app_dir=str(Path(__file__).resolve().parent),
        host=args.host,
        port=args.port,
        access_log=args.access_log,
        log_level="info",
        timeout_graceful_shutdown=30,  # SIGTERM: how long the requests in flight get
    )


if __name__ == "__main__":
    gc.freeze()  # the imports live as long as the process: out of the collector's sight
    main()
