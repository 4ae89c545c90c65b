# mixle_spark developer tasks. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
EXTRAS ?= spark,test,dev,bench,mpi,plot,dask,ray
# The tests (and mypy) also need torch and lightning: ~5 GB with PyPI's CUDA build, so `make demo` skips them.
TEST_EXTRAS ?= $(EXTRAS),torch,lightning
# The mpich wheel (extra `mpi`) puts mpiexec beside the venv's python; mpi4py finds its libmpi itself.
MPIEXEC ?= $(VENV)/bin/mpiexec
MPI_PYTEST := $(PY) -m pytest tests/mpi -m mpi -q -p no:cacheprovider
TORCHRUN := OMP_NUM_THREADS=1 timeout 600 $(PY) -m torch.distributed.run --standalone
TORCHRUN_PYTEST := -m pytest tests/torchrun -m torchrun -q -p no:cacheprovider

.DEFAULT_GOAL := help
.PHONY: help setup demo demo-delta test test-mpi test-torchrun test-fast lint format bench sample-data clean

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[$(TEST_EXTRAS)]"
	touch $(TEST_STAMP)

setup: $(STAMP) ## Create .venv and install the package with the spark, test, dev, bench, mpi and plot extras

demo: $(STAMP) ## Fit conf/models/sample.json to the bundled sample (Parquet) with Spark; writes output/sample_fit/
	$(PY) jobs/em_fit.py

demo-delta: $(STAMP) ## The demo through a local Delta table (output/customers_sample_delta, written once)
	$(PY) jobs/em_fit.py --sample-delta

test: $(TEST_STAMP) ## Run the whole test suite (unit, spark, slow; then MPI and torchrun tests with 2 and 3 processes)
	$(PY) -m pytest -q --durations=25
	$(MAKE) --no-print-directory test-mpi
	$(MAKE) --no-print-directory test-torchrun

test-mpi: $(STAMP) ## Run the MPI backend's SPMD tests under mpiexec with 2 and 3 ranks
	OMP_NUM_THREADS=1 timeout 600 $(MPIEXEC) -n 2 $(MPI_PYTEST)
	OMP_NUM_THREADS=1 timeout 600 $(MPIEXEC) -n 3 $(MPI_PYTEST)

test-torchrun: $(TEST_STAMP) ## Run the torchrun backend's and the training modules' tests under torchrun (gloo), 2 and 3 processes (and 4 for 2-D meshes)
	$(TORCHRUN) --nproc-per-node 2 $(TORCHRUN_PYTEST)
	$(TORCHRUN) --nproc-per-node 3 $(TORCHRUN_PYTEST)
	$(TORCHRUN) --nproc-per-node 4 -m pytest tests/torchrun/test_hybrid_meshes.py -m torchrun -q -p no:cacheprovider

test-fast: $(TEST_STAMP) ## Run the tests not marked slow
	$(PY) -m pytest -q -m "not slow"

lint: $(TEST_STAMP) ## ruff (lint + format check) and mypy
	$(PY) -m ruff check mixle_spark tests jobs notebooks
	$(PY) -m ruff format --check mixle_spark tests jobs notebooks
	$(PY) -m mypy

format: $(STAMP) ## Apply ruff formatting and safe fixes
	$(PY) -m ruff check --fix mixle_spark tests jobs notebooks
	$(PY) -m ruff format mixle_spark tests jobs notebooks

bench: $(STAMP) ## Local backend vs scikit-learn GaussianMixture (per-iteration ratios)
	$(PY) jobs/benchmark.py --local

sample-data: $(STAMP) ## Regenerate data/customers_sample.parquet from its known true model
	$(PY) jobs/make_sample_data.py --output data/customers_sample.parquet

clean: ## Remove the virtual environment and build / test outputs
	rm -rf $(VENV) output .pytest_cache .mypy_cache .ruff_cache *.egg-info
