"""Remove what the unchosen options would leave behind, so the tree holds exactly what it needs.

Runs inside the freshly generated project. Answers arrive through ``| tojson`` (data,
never code); the decision is a plain function so the template's tests can call it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# What each yes/no extra brings: removed together when the answer is "no".
EXTRAS = {
    "tuning": ("sweep.py", "configs/sweep.yaml", "src/{package}/tune", "tests/tune"),
    "serving": ("serve.py", "src/{package}/serve", "tests/serve"),
}
# Tests of one logger's own code, kept only in a project that logs with it.
LOGGER_TESTS = {"wandb": "tests/test_wandb.py", "mlflow": "tests/test_mlflow.py"}


def paths_to_remove(answers: dict[str, str]) -> list[str]:
    """Project-relative paths that the chosen options do not need."""
    remove = []
    if answers["license"] == "none":
        remove.append("LICENSE")
    if answers["github_ci"] != "yes":
        remove.append(".github")
    for extra, paths in EXTRAS.items():
        if answers[extra] != "yes":
            remove += [path.format(package=answers["package_name"]) for path in paths]
    remove += [path for logger, path in LOGGER_TESTS.items() if answers["logger"] != logger]
    return remove


def main(answers: dict[str, str], project_dir: Path) -> int:
    for relative in paths_to_remove(answers):
        path = project_dir / relative
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(
        main(
            {
                "license": {{cookiecutter.license | tojson}},
                "github_ci": {{cookiecutter.github_ci | tojson}},
                "tuning": {{cookiecutter.tuning | tojson}},
                "serving": {{cookiecutter.serving | tojson}},
                "logger": {{cookiecutter.logger | tojson}},
                "package_name": {{cookiecutter.package_name | tojson}},
            },
            Path.cwd(),
        )
    )
