# The two commands: `make demo` (set up, then a real distributed training run) and `make test`
# (set up, then the whole test suite). Both install everything they need on first use.
# The stack: TF=2.21 (the default: TensorFlow 2.21, Keras 3 + Keras 2 on the newest of Python 3.13/3.12/3.11,
# in .venv) or TF=2.15 (TensorFlow 2.15.1 on Python 3.11, in .venv-tf2.15); PYTHON= picks the
# interpreter. Both virtualenvs can exist side by side.
TF ?= 2.21
ifeq ($(TF),2.15)
VENV ?= .venv-tf2.15
else
VENV ?= .venv
endif
BIN := $(VENV)/bin
NP ?= 4
# Test files run this many at a time (pytest-xdist, each file whole in one worker: its module
# fixtures are built once). Many of the suite's jobs wait more than they compute (elastic
# timeouts, restarts, hosts cut off), so 2 streams suit a 2-core machine; 0 runs them one by one.
PYTEST_JOBS ?= 2
# The TensorFlow 2.15 stack's part of CI (`make test-tf215`): strategies, estimators, IPU
# conformance, one elastic scenario and the launcher.
TF215_TESTS ?= tests/test_strategies.py tests/test_host_input.py tests/test_estimator.py \
	tests/test_estimator_steps.py tests/graphcore/test_gc_conformance.py \
	tests/graphcore/test_gc_test_names.py tests/graphcore/test_host_collectives.py \
	tests/graphcore/test_pipeline_estimator.py tests/graphcore/test_one_process_replication.py \
	tests/graphcore/test_multi_worker_tf1.py \
	tests/test_launcher.py tests/test_elastic_horovod.py::test_one_host_a_killed_instance_is_started_again

.PHONY: setup demo test test-tf215 bench clean
setup:
	@TF=$(TF) VENV=$(VENV) bash scripts/setup.sh

demo: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/poprun-lite -np $(NP) examples/cnn_estimator.py --min-accuracy 0.95

test: setup
	$(BIN)/ruff check popdist_launcher popdist tests benchmarks examples scripts
	@bash scripts/install-test-hosts.sh || test "$$CI" != true
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest tests -n $(PYTEST_JOBS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

test-tf215:
	@$(MAKE) --no-print-directory setup TF=2.15
	PATH="$(abspath .venv-tf2.15/bin):$$PATH" .venv-tf2.15/bin/python -m pytest $(TF215_TESTS) -n $(PYTEST_JOBS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python benchmarks/launch_overhead.py

clean:
	rm -rf .venv .venv-tf2.15 build *.egg-info .pytest_cache benchmarks/results
