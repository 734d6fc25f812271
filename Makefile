# eyas — two commands on a fresh machine: `make quickstart` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint format quickstart bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch first (docs/development.md has GPU installs), then eyas with test extras.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check src tests bench
	bash tools/bench_data.sh $(BIN)/python  # benchmark prompt sets into $$EYAS_CACHE (once)
	# ShareGPT besides them: bench_real_quality's training prompts (bench/real_prompts.py)
	bash tools/prompt_data.sh $(BIN)/python
	# the real target of the `real` tier: fetched and converted once, cached under $$EYAS_CACHE
	bash tools/smollm2.sh $(BIN)/python
	# SGLang's own rope/layer-id/DFlash-config sources (two wheels, unpacked in part) for the
	# contract tests that run them on CPU
	bash tools/sglang_src.sh $(BIN)/python
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

format: $(STAMP)
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

quickstart: $(STAMP)
	$(BIN)/eyas quickstart

clean:
	rm -rf $(VENV) .pytest_cache runs
