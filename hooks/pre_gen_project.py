"""Refuse answers that would bake a broken project, before any file is written.

Cookiecutter renders this file, then runs it; a non-zero exit makes it delete the
half-made output folder. The answers arrive through ``| tojson``, so whatever a user
typed is a Python string literal here, never code. The checks are plain functions so
the template's tests import and call them directly.
"""

from __future__ import annotations

import keyword
import sys

# scikit-learn 1.9 (pinned in the project) needs Python 3.11 or newer.
SUPPORTED_PYTHON = ("3.11", "3.12", "3.13")

# Top-level modules the generated project imports, plus the names of its own files
# (train.py, predict.py, serve.py, tests/, ...): a package named like any of them would shadow it.
PROJECT_MODULES = frozenset(
    {
        "fastapi",
        "jsonargparse",
        "lightning",
        "lightning_fabric",
        "matplotlib",
        "mlflow",
        "numpy",
        "onnx",
        "onnxruntime",
        "optuna",
        "psutil",
        "pytest",
        "pytorch_lightning",
        "scipy",
        "sklearn",
        "starlette",
        "tensorboard",
        "torch",
        "torchmetrics",
        "torchvision",
        "uvicorn",
        "wandb",
        "yaml",
        "configs",
        "evaluate",
        "predict",
        "serve",
        "src",
        "sweep",
        "tests",
        "train",
    }
)


def package_name_error(name: str) -> str | None:
    """Say why ``name`` cannot be the package name, or return None when it can."""
    example = "e.g. 'digits_classifier'"
    if not name.isidentifier() or not name.isascii():
        return (
            f"package_name {name!r} is not a valid Python identifier: use ASCII letters, "
            f"digits and underscores, not starting with a digit ({example})."
        )
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return f"package_name {name!r} is a Python keyword: choose another name ({example})."
    if name != name.lower():
        return f"package_name {name!r} has capitals: PEP 8 packages are lower case ({example})."
    lowered = name.lower()
    if lowered in sys.stdlib_module_names:
        return (
            f"package_name {name!r} shadows the standard-library module {lowered!r}: "
            f"choose another name ({example})."
        )
    if lowered in PROJECT_MODULES:
        return (
            f"package_name {name!r} shadows {lowered!r}, which the generated project "
            f"imports or contains: choose another name ({example})."
        )
    return None


def project_slug_error(slug: str) -> str | None:
    """Say why ``slug`` cannot be the folder/distribution name, or return None."""
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")
    if not slug or not set(slug) <= allowed or not slug[0].isalnum():
        return (
            f"project_slug {slug!r} must be lower-case ASCII letters, digits, '-', '_' or "
            "'.', starting with a letter or digit (e.g. 'digits-classifier')."
        )
    return None


def python_version_error(version: str) -> str | None:
    """Say why ``version`` is not a supported minimum Python, or return None."""
    if version not in SUPPORTED_PYTHON:
        return (
            f"python_version {version!r} is not supported: choose one of "
            f"{', '.join(SUPPORTED_PYTHON)} (e.g. '3.11')."
        )
    return None


def validate(answers: dict[str, str]) -> list[str]:
    """Every problem with the answers, one line each; empty when all are valid."""
    checks = (
        project_slug_error(answers["project_slug"]),
        package_name_error(answers["package_name"]),
        python_version_error(answers["python_version"]),
    )
    return [error for error in checks if error]


def main(answers: dict[str, str]) -> int:
    errors = validate(answers)
    for error in errors:
        print(f"ERROR: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(
        main(
            {
                "project_slug": {{cookiecutter.project_slug | tojson}},
                "package_name": {{cookiecutter.package_name | tojson}},
                "python_version": {{cookiecutter.python_version | tojson}},
            }
        )
    )
