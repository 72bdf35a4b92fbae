# envbuild developer targets. `make install` sets up everything on a fresh Debian/Ubuntu machine,
# `make test` runs the whole suite (it starts the Docker engine it needs); `make unit` the pure
# tests (tests/unit, no processes), `make cli` the CLI tests (tests/cli, no Docker).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
WORK ?= .work
TORCH_PIN ?= torch==2.13.0

.PHONY: install system-deps venv engine fixtures slurm test unit cli lint typecheck golden bench docs clean

install: system-deps venv fixtures slurm

system-deps:
	bash .ci/system-deps.sh

venv: $(BIN)/envbuild

$(BIN)/envbuild: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' '$(TORCH_PIN)'
	touch $@

engine:
	bash .ci/engine.sh start
	bash .ci/engine.sh prune-if-low

fixtures: engine
	bash .ci/fixtures.sh $(WORK)

# a two-node Slurm cluster on this host (munge, slurmctld, slurmd -N n1/n2) for
# tests/integration/test_cluster_slurm.py
slurm:
	bash .ci/slurm.sh start

lint: venv
	$(BIN)/ruff check envbuild tests
	$(BIN)/mypy

typecheck: lint

unit: venv
	$(BIN)/pytest -q -n auto tests/unit

cli: venv
	$(BIN)/pytest -q tests/cli

# The pure and CLI tests on every core (pytest-xdist: 3 min instead of ~4.5 on 2 cores), then the
# engine tests in one process: they share images and the engine, and the leak check runs last.
# --durations: the slowest tests, where CI time goes.
test: venv engine fixtures slurm lint
	ENVBUILD_WORK=$(abspath $(WORK)) $(BIN)/pytest -q -n auto --durations=10 tests/unit tests/cli
	ENVBUILD_WORK=$(abspath $(WORK)) $(BIN)/pytest -q --durations=30 tests/integration

# every golden: the rendered contexts (tests/golden/<case>) and the cluster files (tests/golden/cluster)
golden: venv
	ENVBUILD_UPDATE_GOLDEN=1 $(BIN)/pytest -q tests/cli/test_render.py tests/unit/test_cluster.py -k golden

bench: venv
	$(BIN)/python tests/bench.py

# the docs site into build/docs (config: docs/_mkdocs/mkdocs.yml); --strict: a broken link or anchor fails
docs: venv
	$(BIN)/mkdocs build --strict -f docs/_mkdocs/mkdocs.yml

clean:
	rm -rf $(VENV) $(WORK) dist build .pytest_cache .mypy_cache .ruff_cache
