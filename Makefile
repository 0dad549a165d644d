# The two entry points of the README. Each builds its own venv, so a fresh machine with Python and pip is enough.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel of torch; pip takes it from the local wheel cache where there is one. `make test` installs with
# --no-compile and compiles the bytecode on every core after (pip compiles on one: 137 s against 46 + 62 s on the AVX2
# EPYC, 2026-11-28). The bytecode must be there: with PYTHONDONTWRITEBYTECODE=1 (set on this project's machines) every
# process would compile what it imports again, which doubled the suite's time.
TORCH ?= torch==2.13.0

.PHONY: demo test test-long lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Main job on the embedded corpus (Python's own docs): continued pre-training of a tiny model, then contextual AS2
# fine-tuning of the result, then ranking with the saved folder.
demo: $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH)" .
	$(BIN)/python -m as2hub.run_scripts.demo --output_dir outputs/demo

# The test suite, as CI runs it (non-editable install: checks what users get from `pip install .`); the onnx extra
# so that the ONNX Runtime tests run, the serve extra (Ray Serve, Ray Data) so that the service and batch-scoring tests run;
# two pytest-xdist workers (2 CPUs in CI; tests/conftest.py keeps each module with a module fixture, and the Ray
# tests, on one worker, and hands out the longest units first: --no-loadscope-reorder keeps that order).
# The long lane (a default run trained for minutes to show that it learns; inductor building every graph of an int8
# cascade ranker) is left out and named at the end of the output, to keep CI near its 15-minute goal (the README says
# what it measured); `make test-long` runs it (on one core; the learning checks in seconds on a GPU).
test: $(BIN)/python
	$(BIN)/pip install --quiet --no-compile "$(TORCH)" ".[test,onnx,serve]"
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true  # a few files in some packages never compile; pip ignores them too
	$(BIN)/pytest -q -n 2 --dist loadgroup --no-loadscope-reorder -m "not long"

test-long: $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH)" ".[test,onnx,serve]"
	$(BIN)/pytest -q -m long

lint: $(BIN)/python
	$(BIN)/pip install --quiet ruff
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) outputs build *.egg-info
