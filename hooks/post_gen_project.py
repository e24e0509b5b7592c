"""Remove what the unchosen options would leave behind, so the tree holds exactly what it needs.

Runs inside the freshly generated project. Answers arrive through ``| tojson`` (data,
never code); the decision is a plain function so the template's tests can call it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def paths_to_remove(answers: dict[str, str]) -> list[str]:
    """Project-relative paths that the chosen options do not need."""
    remove = []
    if answers["license"] == "none":
        remove.append("LICENSE")
    if answers["github_ci"] != "yes":
        remove.append(".github")
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
            },
            Path.cwd(),
        )
    )
