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
    "license": ["MIT", "Apache-2.0", "BSD-3-Clause", "none"],
    "github_ci": ["yes", "no"],
    "python_version": ["3.11", "3.12", "3.13"],
}
LEFTOVER_JINJA = re.compile(r"\{\{\s*cookiecutter|\{%|%\}|\{#")


def expected_files(package: str, license: str = "MIT", github_ci: str = "yes") -> set[str]:
    files = {
        ".gitignore",
        ".pre-commit-config.yaml",
        "README.md",
        "pyproject.toml",
        "train.py",
        "predict.py",
        "sweep.py",
        "evaluate.py",
        "serve.py",
        "configs/default.yaml",
        "configs/sweep.yaml",
        *(
            f"configs/{name}.yaml"
            for name in (
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
        ),
        "scripts/slurm.sbatch",
        *(
            f"src/{package}/{name}.py"
            for name in (
                "__init__",
                "artifacts",
                "baselines",
                "callbacks",
                "checkpoints",
                "cli",
                "data",
                "data_files",
                "deferred_imports",
                "export",
                "hardware",
                "hook_dispatch",
                "images",
                "interruption",
                "model",
                "module",
                "network_check",
                "options",
                "plots",
                "report",
                "resumable_loader",
                "runtime",
                "logger_resume",
                "mlflow_store",
                "model_inputs",
                "search_space",
                "serving",
                "evaluation",
                "summary",
                "sweep_report",
                "sweep_setup",
                "tables",
                "trial_builder",
                "tuning",
                "web_app",
            )
        ),
        *(
            f"tests/{name}.py"
            for name in (
                "__init__",
                "conftest",
                "test_baselines",
                "test_callbacks",
                "test_checkpoints",
                "probes",
                "subprocesses",
                "test_data",
                "test_data_files",
                "test_deferred_imports",
                "networks",
                "test_distributed",
                "test_evaluate",
                "test_export",
                "test_fault_recovery",
                "test_hook_dispatch",
                "test_image_folders",
                "test_interruption",
                "test_mlflow_store",
                "test_properties",
                "test_model",
                "test_module",
                "test_plots",
                "test_predict",
                "test_preset_training",
                "test_presets",
                "test_runtime",
                "test_search_space",
                "test_serve",
                "test_sweep",
                "test_train",
                "test_trial_builder",
            )
        ),
    }
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
        DEFAULT_PACKAGE, **{k: value for k in [option] if k in ("license", "github_ci")}
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
    result = run([PYTHON, "-c", f"import {package}.model"], cwd=project, PYTHONPATH="src")
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
