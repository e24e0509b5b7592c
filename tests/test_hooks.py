"""Unit tests of the hooks' plain functions (no baking)."""

import pytest

from .conftest import load_hook

pre = load_hook("pre_gen_project")
post = load_hook("post_gen_project")

VALID = {
    "project_slug": "digits-classifier",
    "package_name": "digits_classifier",
    "python_version": "3.11",
}


def test_valid_answers_pass() -> None:
    assert pre.validate(VALID) == []


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("my-package", "not a valid Python identifier"),
        ("1st_model", "not a valid Python identifier"),
        ("café", "not a valid Python identifier"),
        ("", "not a valid Python identifier"),
        ("class", "keyword"),
        ("match", "keyword"),
        ("MyModel", "capitals"),
        ("json", "standard-library"),
        ("logging", "standard-library"),
        ("torch", "generated project"),
        ("lightning", "generated project"),
        ("sklearn", "generated project"),
        ("train", "generated project"),
        ("tests", "generated project"),
    ],
)
def test_bad_package_names_are_named_with_the_reason(name: str, reason: str) -> None:
    error = pre.package_name_error(name)
    assert error is not None and reason in error
    assert repr(name) in error, "the message names the bad value"
    assert "e.g. 'digits_classifier'" in error, "the message gives a valid example"


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_supported_python_versions(version: str) -> None:
    assert pre.python_version_error(version) is None


@pytest.mark.parametrize("version", ["3.9", "3.10", "2.7", "3", "3.11.4", "latest"])
def test_unsupported_python_versions_are_refused(version: str) -> None:
    error = pre.python_version_error(version)
    assert error is not None and repr(version) in error and "3.11" in error


@pytest.mark.parametrize("slug", ["", "-x", "My Project", "a/b", "x;rm -rf"])
def test_bad_slugs_are_refused(slug: str) -> None:
    assert pre.project_slug_error(slug) is not None


def test_main_reports_every_error_on_one_line_each(capsys: pytest.CaptureFixture) -> None:
    answers = {**VALID, "package_name": "class", "python_version": "3.9"}
    assert pre.main(answers) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("ERROR: ") for line in lines)


BAKE = {
    "license": "MIT",
    "github_ci": "yes",
    "tuning": "yes",
    "serving": "yes",
    "logger": "tensorboard",
    "package_name": "digits_classifier",
}
OTHER_LOGGERS_TESTS = ["tests/test_wandb.py", "tests/test_mlflow.py"]
TUNING = ["sweep.py", "configs/sweep.yaml", "src/digits_classifier/tune", "tests/tune"]
SERVING = ["serve.py", "src/digits_classifier/serve", "tests/serve"]


@pytest.mark.parametrize(
    ("answers", "removed"),
    [
        ({}, OTHER_LOGGERS_TESTS),
        ({"license": "none"}, ["LICENSE", *OTHER_LOGGERS_TESTS]),
        ({"github_ci": "no"}, [".github", *OTHER_LOGGERS_TESTS]),
        ({"tuning": "no"}, [*TUNING, *OTHER_LOGGERS_TESTS]),
        ({"serving": "no"}, [*SERVING, *OTHER_LOGGERS_TESTS]),
        ({"tuning": "no", "serving": "no"}, [*TUNING, *SERVING, *OTHER_LOGGERS_TESTS]),
        ({"logger": "wandb"}, ["tests/test_mlflow.py"]),
        ({"logger": "mlflow"}, ["tests/test_wandb.py"]),
    ],
)
def test_post_gen_removes_only_what_options_do_not_need(answers: dict, removed: list) -> None:
    assert post.paths_to_remove({**BAKE, **answers}) == removed
