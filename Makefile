# gpuopt: two commands on a fresh machine — `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The project's own venv uses the CPU build of torch 2.13.0; bring your own CUDA build with
#   make demo TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
RUN ?= gpuopt-runs/demo

.PHONY: demo test test-fast lint bench gpu-check ci-baseline clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e '.[dev,frameworks]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/gpuopt profile --force -o $(RUN) examples/slow_dataset.py
	$(VENV)/bin/gpuopt report $(RUN) -o $(RUN)/report.html
	@echo "HTML report: $(RUN)/report.html"
	@echo "Next: source $(VENV)/bin/activate (puts gpuopt on the PATH), then gpuopt profile train.py"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check gpuopt tests benchmarks examples
	$(VENV)/bin/ruff format --check gpuopt tests benchmarks
	$(VENV)/bin/mypy

test: $(VENV)/.installed lint
	$(PY) -m pytest -q -n 2 --durations=15

# the vision stack in a venv of its own, for the tests that run gpuopt on timm
# (tests/test_frameworks_timm.py, skipped without it; .ci/run builds it, make test does not):
# PyPI's torchvision is built for a CUDA torch and fails to import beside .venv's CPU torch 2.13.0,
# so this venv holds torch 2.14.1's CUDA build (about 5.5 GB; it runs on the CPU) and torchvision 0.29.1
VISION_VENV := .venv-vision
$(VISION_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VISION_VENV)
	$(VISION_VENV)/bin/python -m pip install -q --upgrade pip
	$(VISION_VENV)/bin/python -m pip install -q torch==2.14.1 -e '.[frameworks-vision]'
	touch $@

# the quick loop: the tests that start no process and are not marked slow (tests/conftest.py)
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -m "not slow"

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_profile.py

# gpuopt's GPU-only paths on a CUDA machine in at most 4 minutes, each result appended to
# docs/gpu-validation.md as it is measured; exits 0 without a GPU. Needs no install: the venv's
# python where there is one, else python3 with the machine's torch (docs/gpu-validation.md)
GPU_PY := $(if $(wildcard $(PY)),$(PY),$(PYTHON))
gpu-check:
	$(GPU_PY) benchmarks/gpu/gpu_check.py

# the baseline the project's CI gates examples/sync_metrics.py against (exact counters only:
# .github/workflows/ci.yml); re-record it on purpose, when the example or torch changes
ci-baseline: $(VENV)/.installed
	$(VENV)/bin/gpuopt profile --quiet --force -o ci/baseline/sync_metrics --steps 40 examples/sync_metrics.py

# the compatibility matrix (docs/compatibility.md): one venv per entry in .venv-matrix/, the suite
# in each, a table of passed/failed/skipped; MATRIX="floors torch-2.14.1" runs those entries only,
# PYTEST_ARGS="-q tests/test_cli_entry.py" a subset, OLDEST_TORCH another oldest torch than pyproject.toml's
OLDEST_TORCH ?=
MATRIX ?=
PYTEST_ARGS ?= -q
.PHONY: test-matrix
test-matrix:
	OLDEST_TORCH=$(OLDEST_TORCH) PYTEST_ARGS="$(PYTEST_ARGS)" $(PYTHON) ci/test_matrix.py $(MATRIX)

clean:
	rm -rf $(VENV) $(VISION_VENV) gpuopt-runs .pytest_cache .mypy_cache .ruff_cache
