# The two commands: `make demo` (set up, then a real distributed training run) and `make test`
# (set up, then the whole test suite). Both install everything they need on first use.
VENV ?= .venv
BIN := $(VENV)/bin
NP ?= 4

.PHONY: setup demo test bench clean
setup:
	@VENV=$(VENV) bash scripts/setup.sh

demo: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/poprun-lite -np $(NP) examples/cnn_estimator.py --min-accuracy 0.95

test: setup
	$(BIN)/ruff check popdist_launcher popdist tests benchmarks examples scripts
	@bash scripts/install-test-hosts.sh || test "$$CI" != true
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest tests $(PYTEST_ARGS)

bench: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python benchmarks/launch_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache benchmarks/results
