"""Image files to model inputs: the one conversion that training, predict.py and serving
share (Pillow and numpy only). Its settings travel beside every export as ``ImageFormat``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
ColorMode = Literal["L", "RGB"]


class ImageError(ValueError):
    """A file that cannot be decoded as an image; the message names it."""


@dataclass(frozen=True)
class ImageFormat:
    """How a file becomes a (C, H, W) float32 array: colour mode, size (height, width),
    and value = (255 - pixel if invert else pixel) * scale / 255."""

    color_mode: ColorMode
    size: tuple[int, int]
    invert: bool = False
    scale: float = 1.0

    @property
    def shape(self) -> tuple[int, int, int]:
        return (1 if self.color_mode == "L" else 3, *self.size)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "image", **asdict(self), "size": list(self.size)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ImageFormat:
        return cls(values["color_mode"], tuple(values["size"]), values["invert"], values["scale"])


def is_image_file(path: Path) -> bool:
    return (
        path.is_file() and not path.name.startswith(".") and path.suffix.lower() in IMAGE_SUFFIXES
    )


def probe(path: Path) -> tuple[ColorMode, tuple[int, int]]:
    """The colour mode (grayscale or RGB) and (height, width) of one image file."""
    image = _open(path)
    with image:
        gray = image.mode in ("1", "L", "LA", "I", "I;16", "F")
        return ("L" if gray else "RGB"), (image.height, image.width)


def read_image(path: Path | BinaryIO, fmt: ImageFormat, name: str | None = None) -> np.ndarray:
    """(C, H, W) float32: converted to the colour mode, resized (area-averaging), scaled.
    ``path``: a file, or an open binary stream (an upload) that ``name`` names in errors."""
    from PIL import Image

    source = path if isinstance(path, Path) else _Named(path, name or "the image")
    image = _open(source)
    with image:
        try:
            converted = image.convert(fmt.color_mode)
            if (converted.height, converted.width) != fmt.size:
                height, width = fmt.size
                converted = converted.resize((width, height), Image.Resampling.BOX)
            pixels = np.asarray(converted, dtype=np.float32)
        except (OSError, ValueError) as error:  # truncated or corrupt pixel data
            raise ImageError(f"cannot read {source} as an image: {error}") from None
    if fmt.invert:
        pixels = 255.0 - pixels
    pixels = pixels * (fmt.scale / 255.0)
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)  # (C, H, W)


class _Named:
    """A binary stream that prints as its name in error messages."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self.stream, self.name = stream, name

    def __str__(self) -> str:
        return self.name


def _open(path: Path | _Named) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(path.stream if isinstance(path, _Named) else path)
    except UnidentifiedImageError:
        raise ImageError(f"cannot read {path} as an image: not a PNG, JPEG or BMP file") from None
    except (OSError, Image.DecompressionBombError) as error:
        raise ImageError(f"cannot read {path} as an image: {error}") from None
