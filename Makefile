# Two set-up commands: `make demo` (runs the pipeline on a synthetic twin) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install bench wheel clean

$(STAMP): setup.py
	bash .ci/ensure-java
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,catboost]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/lia-spark run --conf conf/demo.yaml

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

wheel: $(STAMP)
	$(PY) -m pip wheel --no-deps --wheel-dir dist .

clean:
	rm -rf runs dist build *.egg-info .pytest_cache mlflow.db mlruns
