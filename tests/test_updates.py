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

from .conftest import DEFAULT_PACKAGE, DEFAULT_SLUG, PYTHON, TEMPLATE_DIR, run

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


def test_an_extra_left_out_is_added_later_and_its_tests_pass(
    template_repo: Path, tmp_path: Path
) -> None:
    """Baked without tuning, then `cruft update --variables-to-update '{"tuning": "yes"}'`:
    the project has sweep.py, its code, config, tests and packages, and those tests pass."""
    out = tmp_path / "projects"
    out.mkdir()
    answers = json.dumps({"tuning": "no", "serving": "no", "logger": "csv"})
    created = cruft(out, "create", str(template_repo), "--no-input", "--extra-context", answers)
    assert created.returncode == 0, created.stdout + created.stderr
    project = out / DEFAULT_SLUG
    assert not (project / "sweep.py").exists()
    git(project, "init", "--quiet", "--initial-branch", "main")
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "--message", "baked")

    added = cruft(
        project, "update", "--variables-to-update", '{"tuning": "yes"}', "--skip-apply-ask"
    )
    assert added.returncode == 0, added.stdout + added.stderr
    for path in ("sweep.py", "configs/sweep.yaml", "tests/tune"):
        assert (project / path).exists(), path
    assert '"optuna==' in (project / "pyproject.toml").read_text()
    assert not (project / "serve.py").exists(), "only what was asked for"
    suite = run(
        [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "tuning", "-x"],
        cwd=project,
        timeout=1200,  # a bound on a hang, not a speed check
        OMP_NUM_THREADS="1",
    )
    assert suite.returncode == 0, suite.stdout[-5000:] + suite.stderr[-3000:]
    assert " passed" in suite.stdout.splitlines()[-1]


# The template's commit before the extras became prompts (sweep.py and serve.py in every bake).
BEFORE_EXTRAS = "aa2eff7"


def test_a_project_baked_before_the_extras_keeps_sweep_and_serve_through_an_update(
    tmp_path: Path,
) -> None:
    """A `.cruft.json` made before the tuning and serving prompts existed: the update takes
    their defaults ("yes"), so the project keeps sweep.py and serve.py, in the new layout."""
    repo = tmp_path / "template"
    repo.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(TEMPLATE_DIR), "archive", BEFORE_EXTRAS],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        pytest.fail(f"the template's history lacks {BEFORE_EXTRAS}: test from a full clone")
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive.stdout, check=True)
    git(repo, "init", "--quiet", "--initial-branch", "main")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--message", "before the extras")
    out = tmp_path / "projects"
    out.mkdir()
    created = cruft(out, "create", str(repo), "--no-input")
    assert created.returncode == 0, created.stdout + created.stderr
    project = out / DEFAULT_SLUG
    assert (
        "tuning" not in json.loads((project / ".cruft.json").read_text())["context"]["cookiecutter"]
    )
    git(project, "init", "--quiet", "--initial-branch", "main")
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "--message", "baked")

    for path in repo.iterdir():  # the template as it is now
        if path.name != ".git":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    shutil.copytree(TEMPLATE_DIR, repo, ignore=NOT_TEMPLATE, dirs_exist_ok=True)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--message", "extras chosen at bake time")

    updated = cruft(project, "update", "--skip-apply-ask")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    for path in (
        "sweep.py",
        "serve.py",
        f"src/{DEFAULT_PACKAGE}/tune",
        f"src/{DEFAULT_PACKAGE}/serve",
    ):
        assert (project / path).exists(), path
    assert not (project / f"src/{DEFAULT_PACKAGE}/tuning.py").exists(), "the old layout is gone"
    for path in project.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            assert "<<<<<<<" not in path.read_text(errors="replace"), path
