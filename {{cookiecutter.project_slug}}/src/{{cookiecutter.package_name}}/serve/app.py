"""serve.py's HTTP endpoints, on FastAPI (run by uvicorn): POST /predict, GET /health,
GET /metadata. FastAPI was chosen over LitServe by measurement (the template's
BENCHMARKS.md, issue 19): on 2 cores it answered 2.9x LitServe's requests per second at 1 and
at 32 clients, and 2x LitServe's with dynamic batching at 32, for the default model.

Every bad request gets a 4xx status and ``{"error": "<what is wrong and the fix>"}``, and the
server goes on serving. The model runs in the event loop's thread: a small CPU model answers
in well under a millisecond, less than a hand-off to a thread pool costs; start more
processes (--workers) to use more cores.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from .serving import RequestError, ServedModel


def create_app(model: ServedModel) -> FastAPI:
    app = FastAPI(
        title=f"{model.path.name} ({model.format})",
        description="Predicts classes with an exported model: POST /predict.",
    )

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
        """JSON ``{"inputs": [sample, ...]}`` or ``{"input": sample}``; for an image model
        also an image file, as the body (Content-Type image/...) or as the multipart form
        field "file" (`curl -F file=@digit.png`)."""
        content_type = request.headers.get("content-type", "application/json").lower()
        body = await _read_body(request, model.limits.max_body_bytes)
        if content_type.startswith("multipart/form-data"):
            data, name = await _uploaded_file(request, model.limits.max_body_bytes)
            samples = model.samples_from_image(data, name)
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


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it is over ``limit`` bytes: announced by its
    Content-Length or found while reading (uvicorn itself sets no limit)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # read once: request.form() parses these bytes
    return body


def _too_large(size: int, limit: int) -> RequestError:
    return RequestError(
        f"the body holds over {limit:,} bytes ({size:,} seen): send smaller requests (or start "
        "serve.py with a larger --max-body-mb)",
        413,
    )


async def _uploaded_file(request: Request, limit: int) -> tuple[bytes, str]:
    from starlette.datastructures import UploadFile

    try:
        form = await request.form(max_files=1, max_fields=4, max_part_size=limit)
    except Exception as error:  # python-multipart's and Starlette's parse errors vary
        raise RequestError(f"cannot read the multipart form: {error}", 400) from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise RequestError('send the image as the form field "file" (curl -F file=@image.png)')
    return await upload.read(), upload.filename or "the uploaded file"
