"""Bake the template with every option value and inspect what it writes (no training here)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from cookiecutter.exceptions import FailedHookException, UndefinedVariableInTemplate
from cookiecutter.main import cookiecutter

from .conftest import DEFAULT_PACKAGE, PYTHON, TEMPLATE_DIR, project_files, run

OPTIONS = {
    "logger": ["tensorboard", "csv", "wandb", "mlflow"],
    "tuning": ["yes", "no"],
    "serving": ["yes", "no"],
    "license": ["MIT", "Apache-2.0", "BSD-3-Clause", "none"],
    "github_ci": ["yes", "no"],
    "python_version": ["3.11", "3.12", "3.13"],
}
# Every extra off, every extra on, and each extra alone (the yes/no prompts).
EXTRAS = ("tuning", "serving")
EXTRA_BAKES = {
    "every-extra-off": dict.fromkeys(EXTRAS, "no"),
    "every-extra-on": dict.fromkeys(EXTRAS, "yes"),
    **{f"{extra}-alone": {e: "yes" if e == extra else "no" for e in EXTRAS} for extra in EXTRAS},
}
LEFTOVER_JINJA = re.compile(r"\{\{\s*cookiecutter|\{%|%\}|\{#")
PACKAGE_FILES = {
    "": ("__init__", "module", "networks", "runtime"),
    "data/": ("__init__", "datamodule", "images", "loading", "sources", "splits"),
    "export/": ("__init__", "formats", "inputs", "verify"),
    "report/": ("__init__", "evaluation", "plots", "summary"),
    "tasks/": ("__init__", "classification", "regression"),
    "training/": (
        "__init__",
        "callbacks",
        "checkpoints",
        "cli",
        "hardware",
        "interruption",
        "loggers",
    ),
}
CORE_TESTS = (
    "__init__",
    "conftest",
    "networks",
    "probes",
    "subprocesses",
    *(
        f"test_{name}"
        for name in (
            "callbacks",
            "checkpoints",
            "classification",
            "data",
            "data_files",
            "distributed",
            "evaluate",
            "export",
            "fault_recovery",
            "image_folders",
            "interruption",
            "model",
            "module",
            "plots",
            "predict",
            "preset_training",
            "presets",
            "properties",
            "regression",
            "runtime",
            "train",
        )
    ),
)
PRESETS = (
    "cpu",
    "gpu",
    "bf16-mixed",
    "16-mixed",
    "ddp",
    "ddp-cpu",
    "multi-node",
    "debug",
    "reproducible",
    "low-memory",
    "cnn",
)
PROJECT = TEMPLATE_DIR / "{{cookiecutter.project_slug}}"


def template_files(folder: str, package: str) -> set[str]:
    """The files of one of the template's folders, as a bake names them."""
    root = PROJECT / folder.replace("{package}", "{{cookiecutter.package_name}}")
    named = folder.replace("{package}", package)
    return {
        f"{named}/{path.relative_to(root).as_posix()}"
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def expected_files(
    package: str,
    license: str = "MIT",
    github_ci: str = "yes",
    logger: str = "tensorboard",
    tuning: str = "yes",
    serving: str = "yes",
) -> set[str]:
    """The exact file set of a bake: the core, then what each answer adds."""
    files = {
        ".gitignore",
        ".pre-commit-config.yaml",
        "README.md",
        "pyproject.toml",
        "train.py",
        "predict.py",
        "evaluate.py",
        "configs/default.yaml",
        *(f"configs/{name}.yaml" for name in PRESETS),
        "scripts/slurm.sbatch",
        *(
            f"src/{package}/{folder}{name}.py"
            for folder, names in PACKAGE_FILES.items()
            for name in names
        ),
        *(f"tests/{name}.py" for name in CORE_TESTS),
    }
    if tuning == "yes":
        files |= {"sweep.py", "configs/sweep.yaml"}
        files |= template_files("src/{package}/tune", package) | template_files(
            "tests/tune", package
        )
    if serving == "yes":
        files.add("serve.py")
        files |= template_files("src/{package}/serve", package)
        files |= template_files("tests/serve", package)
    if logger in ("wandb", "mlflow"):
        files.add(f"tests/test_{logger}.py")
    if license != "none":
        files.add("LICENSE")
    if github_ci == "yes":
        files.add(".github/workflows/ci.yml")
    return files


def assert_no_leftover_jinja(project: Path) -> None:
    for path in project.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            match = LEFTOVER_JINJA.search(text)
            # GitHub Actions' own `${{ ... }}` syntax is expected in the workflow.
            if match and not (
                path.suffix == ".yml" and "${{" in text and "cookiecutter" not in text
            ):
                pytest.fail(
                    f"leftover template syntax {match.group()!r} in {path.relative_to(project)}"
                )


def assert_ruff_clean(project: Path) -> None:
    for args in (["check", "."], ["format", "--check", "."]):
        result = run([PYTHON, "-m", "ruff", *args], cwd=project)
        assert result.returncode == 0, f"ruff {args[0]}:\n{result.stdout}{result.stderr}"


def test_defaults_bake_the_documented_project(bake) -> None:
    project = bake()
    assert project.name == "digits-classifier"
    assert project_files(project) == expected_files(DEFAULT_PACKAGE)
    assert_no_leftover_jinja(project)
    assert_ruff_clean(project)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "digits-classifier"
    assert pyproject["project"]["requires-python"] == ">=3.11"
    assert pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == [
        f"src/{DEFAULT_PACKAGE}"
    ]


@pytest.mark.parametrize(
    ("option", "value"), [(k, v) for k, values in OPTIONS.items() for v in values]
)
def test_every_option_value_bakes_exactly_what_it_needs(bake, option: str, value: str) -> None:
    project = bake(**{option: value})
    assert project_files(project) == expected_files(
        DEFAULT_PACKAGE, **{option: value} if option != "python_version" else {}
    )
    assert_no_leftover_jinja(project)
    assert_ruff_clean(project)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    config = yaml.safe_load((project / "configs" / "default.yaml").read_text())
    dependencies = " ".join(pyproject["project"]["dependencies"])
    if option == "logger":
        logger_class = config["trainer"]["logger"]["class_path"].rsplit(".", 1)[-1]
        classes = {
            "tensorboard": "TensorBoardLogger",
            "csv": "CSVLogger",
            "wandb": "WandbLogger",
            "mlflow": "MLFlowLogger",
        }
        assert logger_class == classes[value]
        # Each logger's package only where it is chosen (CSV needs none).
        for package in ("tensorboard", "wandb", "mlflow"):
            assert (f"{package}==" in dependencies) == (value == package), package
    if option == "license":
        assert pyproject["project"].get("license") == (None if value == "none" else value)
        if value != "none":
            license_text = (project / "LICENSE").read_text()
            title = {
                "MIT": "MIT License",
                "Apache-2.0": "Apache License",
                "BSD-3-Clause": "BSD 3-Clause License",
            }
            assert title[value] in license_text.splitlines()[0] + license_text[:200]
    if option == "python_version":
        assert pyproject["project"]["requires-python"] == f">={value}"
        assert pyproject["tool"]["ruff"]["target-version"] == f"py{value.replace('.', '')}"
    if option == "github_ci" and value == "yes":
        workflow = yaml.safe_load((project / ".github/workflows/ci.yml").read_text())
        steps = workflow["jobs"]["test"]["steps"]
        assert any(step.get("if") == "${{ failure() }}" for step in steps)


# What each extra brings into pyproject.toml and the README, and nothing without it.
EXTRA_PACKAGES = {"tuning": ("optuna==", "optuna-integration=="), "serving": ("fastapi==",)}
EXTRA_SCRIPTS = {"tuning": "sweep.py", "serving": "serve.py"}


@pytest.mark.parametrize("name", list(EXTRA_BAKES))
def test_each_extra_brings_its_code_tests_docs_and_packages_and_nothing_else(
    bake, name: str
) -> None:
    answers = EXTRA_BAKES[name]
    project = bake(**answers)
    assert project_files(project) == expected_files(DEFAULT_PACKAGE, **answers)
    assert_no_leftover_jinja(project)
    assert_ruff_clean(project)
    pyproject = (project / "pyproject.toml").read_text()
    readme = (project / "README.md").read_text()
    for extra, chosen in answers.items():
        for package in EXTRA_PACKAGES[extra]:
            assert (package in pyproject) == (chosen == "yes"), (extra, package)
        script = EXTRA_SCRIPTS[extra]
        assert (f'"{script}"' in pyproject) == (chosen == "yes"), "mypy's files"
        # The README says how to add a missing extra later, and nothing else about it.
        assert (f"python {script}" in readme) == (chosen == "yes"), (extra, script)
        assert f'--variables-to-update \'{{"{extra}": "yes"}}\'' in readme or chosen == "yes"


@pytest.mark.slow
def test_every_extra_off_installs_no_optuna_fastapi_wandb_nor_mlflow(bake) -> None:
    """What `pip install -e ".[dev]"` would install in the lean bake, resolved (uv, from the
    package index): none of the extras' or other loggers' packages, not even indirectly."""
    project = bake(logger="csv", **EXTRA_BAKES["every-extra-off"])
    resolved = run(
        [PYTHON, "-m", "uv", "pip", "compile", "pyproject.toml", "--extra", "dev", "--quiet"],
        cwd=project,
    )
    assert resolved.returncode == 0, resolved.stderr
    names = {line.split("==")[0].lower() for line in resolved.stdout.splitlines() if "==" in line}
    assert {"torch", "lightning", "torchmetrics", "pytest"} <= names
    assert not names & {"optuna", "optuna-integration", "fastapi", "uvicorn", "wandb", "mlflow"}


def test_runtime_pins_match_the_template_test_environment(bake) -> None:
    """The versions the template is tested with are exactly the ones the project pins."""
    project = bake(logger="tensorboard")
    pinned = {}
    for line in (TEMPLATE_DIR / "requirements-dev.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pinned[name.split("[")[0]] = version
    dependencies = tomllib.loads((project / "pyproject.toml").read_text())["project"][
        "dependencies"
    ]
    extras = tomllib.loads((project / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for requirement in dependencies + extras["dev"] + extras["onnx"] + extras["serve"]:
        name, version = requirement.split("==")
        name = name.split("[")[0]
        if name == "torch":
            assert version == "2.13.0"
        else:
            assert pinned.get(name) == version, (
                f"{name}: project pins {version}, tests use {pinned.get(name)}"
            )


HOSTILE = {
    "project_name": 'Zoë\'s "Quoted" \\ Net',
    "description": "Quotes \" and ' and a backslash \\ and {braces} and ünïcödé — ok",
    "author_name": 'O\'Brien "Bob" \\ Ñandú',
    "author_email": "o'brien@example.com",
}


def test_hostile_answers_render_as_data(bake) -> None:
    project = bake(**HOSTILE)
    assert project.name == "zoe-s-quoted-net"
    package = "zoe_s_quoted_net"
    assert project_files(project) == expected_files(package)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["description"] == HOSTILE["description"]
    assert pyproject["project"]["authors"] == [
        {"name": HOSTILE["author_name"], "email": HOSTILE["author_email"]}
    ]
    assert HOSTILE["description"] in (project / "README.md").read_text()
    assert_ruff_clean(project)
    result = run([PYTHON, "-c", f"import {package}.networks"], cwd=project, PYTHONPATH="src")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "answers",
    [
        {"project_name": "Line\nBreak", "description": "one\ntwo"},
        {"description": "Ends with a backslash \\"},
        {"description": '"""triple quotes"""'},
    ],
)
def test_awkward_text_still_bakes_valid_files(bake, answers: dict) -> None:
    project = bake(**answers)
    tomllib.loads((project / "pyproject.toml").read_text())
    assert_ruff_clean(project)
    package = next((project / "src").iterdir()).name
    result = run([PYTHON, "-c", f"import {package}"], cwd=project, PYTHONPATH="src")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "answers",
    [
        {"package_name": "class"},
        {"package_name": "torch"},
        {"package_name": "json"},
        {"package_name": "my-package"},
        {"project_name": "3D Net"},
        {"python_version": "3.9"},
        # cookiecutter renders answers as Jinja: an undefined name is refused up front.
        {"description": "uses {{ braces }}"},
    ],
)
def test_invalid_answers_are_refused_with_nothing_written(tmp_path: Path, answers: dict) -> None:
    with pytest.raises((FailedHookException, UndefinedVariableInTemplate)):
        cookiecutter(
            str(TEMPLATE_DIR), no_input=True, extra_context=answers, output_dir=str(tmp_path)
        )
    assert list(tmp_path.iterdir()) == [], "a refused bake must leave no folder behind"


def test_cli_refusal_is_one_clear_line_and_leaves_no_folder(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            PYTHON,
            "-m",
            "cookiecutter",
            str(TEMPLATE_DIR),
            "--no-input",
            "-o",
            str(tmp_path),
            "package_name=torch",
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode != 0
    # cookiecutter adds its own "Stopping generation" line and traceback; ours is one line.
    ours = [line for line in result.stderr.splitlines() if line.startswith("ERROR: package_name")]
    assert ours == [
        "ERROR: package_name 'torch' shadows 'torch', which the generated project imports or "
        "contains: choose another name (e.g. 'digits_classifier')."
    ]
    assert list(tmp_path.iterdir()) == []
