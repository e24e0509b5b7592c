"""A project made with `cruft create` takes the template's later changes with `cruft update`,
keeping its own; where both changed the same lines, the conflict is left marked, not lost.

The template is copied into a temporary git repository, so the tests can commit "later
versions" of it, as its maintainers would, and update a baked project to them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import DEFAULT_SLUG, PYTHON, TEMPLATE_DIR, run

# What is not the template: local environments and caches (all ignored by its .gitignore).
NOT_TEMPLATE = shutil.ignore_patterns(
    ".git", ".venv", "build", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"
)
TRAIN = "{{cookiecutter.project_slug}}/train.py"
# The first line of the generated train.py's docstring, and what the template changes it to.
TRAIN_DOC = '"""Train, test the best checkpoint, export it (verified), and write summary.json.'
TRAIN_DOC_V2 = '"""Train, test the best checkpoint, export it (verified), write summary.json.'


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def cruft(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run([PYTHON, "-m", "cruft", *args], cwd=cwd)


@pytest.fixture
def template_repo(tmp_path: Path) -> Path:
    """The template at its current state, as the first commit of its own repository."""
    repo = tmp_path / "template"
    shutil.copytree(TEMPLATE_DIR, repo, ignore=NOT_TEMPLATE)
    git(repo, "init", "--quiet", "--initial-branch", "main")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--message", "template v1")
    return repo


@pytest.fixture
def project(template_repo: Path, tmp_path: Path) -> Path:
    """`cruft create TEMPLATE --no-input`, committed by its user as a new repository."""
    out = tmp_path / "projects"
    out.mkdir()
    created = cruft(out, "create", str(template_repo), "--no-input")
    assert created.returncode == 0, created.stdout + created.stderr
    project = out / DEFAULT_SLUG
    link = json.loads((project / ".cruft.json").read_text())
    assert link["template"] == str(template_repo)
    assert link["commit"] == git(template_repo, "rev-parse", "HEAD").strip()
    git(project, "init", "--quiet", "--initial-branch", "main")
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "--message", "baked")
    return project


def commit_change(repo: Path, path: str, old: str, new: str, message: str) -> str:
    """Replace the one occurrence of ``old`` in ``path`` and commit it: a template release
    or a user's change. Returns the new commit."""
    file = repo / path
    text = file.read_text()
    assert text.count(old) == 1, f"{old!r} not once in {path}"
    file.write_text(text.replace(old, new))
    git(repo, "commit", "--quiet", "--all", "--message", message)
    return git(repo, "rev-parse", "HEAD").strip()


def release(template_repo: Path) -> str:
    """Template v2: one line of the generated train.py changed."""
    return commit_change(template_repo, TRAIN, TRAIN_DOC, TRAIN_DOC_V2, "template v2")


def test_update_brings_the_template_change_and_keeps_the_users(
    template_repo: Path, project: Path
) -> None:
    commit_change(project, "configs/default.yaml", "max_epochs: 60", "max_epochs: 30", "mine")
    (project / "mynet.py").write_text("# the user's own network\n")
    git(project, "add", "mynet.py")
    git(project, "commit", "--quiet", "--message", "my network")
    v2 = release(template_repo)

    check = cruft(project, "check")
    assert check.returncode != 0, "cruft check must say the project is behind"
    updated = cruft(project, "update", "--skip-apply-ask")
    assert updated.returncode == 0, updated.stdout + updated.stderr

    assert TRAIN_DOC_V2 in (project / "train.py").read_text()  # the template's change
    assert "max_epochs: 30" in (project / "configs/default.yaml").read_text()  # the user's
    assert (project / "mynet.py").read_text() == "# the user's own network\n"
    assert json.loads((project / ".cruft.json").read_text())["commit"] == v2
    changed = git(project, "status", "--porcelain").splitlines()
    assert sorted(line[3:] for line in changed) == [".cruft.json", "train.py"]
    for path in project.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            assert "<<<<<<<" not in path.read_text(errors="replace"), path
    assert cruft(project, "check").returncode == 0  # up to date now


def test_a_change_of_the_same_lines_is_left_as_a_marked_conflict(
    template_repo: Path, project: Path
) -> None:
    commit_change(project, "train.py", TRAIN_DOC, '"""My own training script.', "mine")
    release(template_repo)

    updated = cruft(project, "update", "--skip-apply-ask")
    output = updated.stdout + updated.stderr
    assert "train.py" in output and "conflict" in output, output  # reported
    text = (project / "train.py").read_text()
    # Both versions kept, between git's markers, for the user to choose: nothing lost.
    assert "<<<<<<<" in text and ">>>>>>>" in text
    assert '"""My own training script.' in text and TRAIN_DOC_V2 in text
    assert "UU train.py" in git(project, "status", "--porcelain").splitlines()


def test_a_project_baked_with_plain_cookiecutter_is_linked_then_updated(
    template_repo: Path, tmp_path: Path
) -> None:
    from cookiecutter.main import cookiecutter

    v1 = git(template_repo, "rev-parse", "HEAD").strip()
    project = Path(cookiecutter(str(template_repo), no_input=True, output_dir=str(tmp_path)))
    assert not (project / ".cruft.json").exists()
    git(project, "init", "--quiet", "--initial-branch", "main")
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "--message", "baked")
    release(template_repo)

    # The commit it was baked from (the template's history, or the date of the bake, tells).
    linked = cruft(project, "link", str(template_repo), "--no-input", "--checkout", v1)
    assert linked.returncode == 0, linked.stdout + linked.stderr
    assert json.loads((project / ".cruft.json").read_text())["commit"] == v1
    git(project, "add", ".cruft.json")
    git(project, "commit", "--quiet", "--message", "linked to the template")
    updated = cruft(project, "update", "--skip-apply-ask")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert TRAIN_DOC_V2 in (project / "train.py").read_text()
