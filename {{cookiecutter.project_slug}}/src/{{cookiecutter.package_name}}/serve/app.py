"""serve.py's endpoints on FastAPI (chosen over LitServe by measurement: the template's
BENCHMARKS.md). A bad request gets a 4xx and ``{"error": "<the problem and the fix>"}``, and
the server goes on. The model runs in the event loop's thread, as a small CPU model answers
faster than a hand-off to a thread pool costs; --workers starts processes for more cores.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.types import Message

from .model import RequestError, ServedModel


def create_app(model: ServedModel) -> FastAPI:
    app = FastAPI(title=f"{model.path.name} ({model.format})")

    @app.exception_handler(RequestError)
    async def refuse(request: Request, error: RequestError) -> JSONResponse:
        return JSONResponse({"error": str(error)}, status_code=error.status)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metadata")
    async def metadata() -> dict[str, Any]:
        return model.describe()

    @app.post("/predict")
    async def predict(request: Request) -> dict[str, Any]:
        """JSON ``{"inputs": [sample, ...]}`` or ``{"input": sample}``; for an image model also
        an image file, as the body (Content-Type image/...) or as the multipart form field
        "file" (`curl -F file=@digit.png`)."""
        content_type = request.headers.get("content-type", "application/json").lower()
        limit = model.limits.max_body_bytes
        body = await read_body(request, limit)
        if content_type.startswith("multipart/form-data"):
            samples = model.samples_from_image(*await uploaded_file(request, body, limit))
        elif content_type.startswith("image/"):
            samples = model.samples_from_image(body, "the request body")
        elif content_type.startswith(("application/json", "text/plain")):
            samples = model.samples_from_json(body)
        else:
            raise RequestError(
                f"unsupported Content-Type {content_type!r}: send application/json"
                + (", an image/... body or a multipart form" if model.inputs.image else ""),
                415,
            )
        return model.predict(samples)

    return app


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it is over ``limit`` bytes, by its Content-Length or
    while it is read (uvicorn itself sets no limit)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(limit: int) -> RequestError:
    return RequestError(
        f"the body holds over {limit:,} bytes: send smaller requests (or start serve.py with a "
        "larger --max-body-mb)",
        413,
    )


async def uploaded_file(request: Request, body: bytes, limit: int) -> tuple[bytes, str]:
    """The form field "file" of a multipart body already read: parsed by Starlette from a
    request whose receive channel replays ``body``."""

    async def replay() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    replayed = Request(request.scope, replay)
    try:
        async with replayed.form(max_files=1, max_fields=4, max_part_size=limit) as form:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise RequestError('send the image as the form field "file" (curl -F file=@a.png)')
            return await upload.read(), upload.filename or "the uploaded file"
    except HTTPException as error:  # Starlette's answer to a malformed form
        raise RequestError(f"cannot read the multipart form: {error.detail}", 400) from None
