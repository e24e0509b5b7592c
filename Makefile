# Two entry points: `make demo` (bake + install + train) and `make test` (every test).
# Both set up .venv themselves on a fresh machine (only the package registry needed).
PYTHON ?= python3
VENV := .venv
PY := $(CURDIR)/$(VENV)/bin/python
DEMO_DIR := build/demo

.PHONY: venv test demo lint bench clean

venv: $(VENV)/.installed

# torch first and alone: a requirement that lets pip choose torch pulls a CUDA build (and
# only pip finds the CPU build on this machine's disk). The rest through uv: 3.9 s against
# pip's 47 s for the same packages (BENCHMARKS.md); torch 2.13 already satisfies them.
# --compile-bytecode: uv writes no .pyc by default (pip does), and where PYTHONDONTWRITEBYTECODE
# is set (these machines) every process then compiles lightning, scipy and the rest from source
# on each import: `import lightning` 6.1 s against 3.8 s with them compiled (BENCHMARKS.md).
$(VENV)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0 uv==0.13.9
	$(PY) -m uv pip install --quiet --compile-bytecode --python $(PY) -r requirements-dev.txt
	touch $@

test: venv
	WANDB_MODE=offline $(PY) -m pytest

lint: venv
	$(PY) -m ruff check hooks tests benchmarks && $(PY) -m ruff format --check hooks tests benchmarks

demo: venv
	rm -rf $(DEMO_DIR)
	$(VENV)/bin/cookiecutter . --no-input --output-dir $(DEMO_DIR)
	cd $(DEMO_DIR)/digits-classifier && $(PY) -m pip install --quiet -e ".[dev]" && $(PY) train.py

# Every benchmark at full size (~40 minutes on 2 cores); figures go into BENCHMARKS.md by hand.
bench: venv
	mkdir -p build
	for script in loop_overhead callback_overhead export_formats runs ddp_plain sweep_cost sweep_splits serve_load; do \
		WANDB_MODE=offline $(PY) benchmarks/$$script.py || exit 1; \
	done 2>build/benchmarks.log | tee build/benchmarks.md

clean:
	rm -rf $(VENV) build .pytest_cache
