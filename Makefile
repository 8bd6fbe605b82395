# Two set-up commands: `make demo` (runs the pipeline on a synthetic twin) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-e2e test-all install bench wheel clean

$(STAMP): setup.py
	bash .ci/ensure-java
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,catboost,spark]'
	touch $(STAMP)

install: $(STAMP)

# The whole pipeline on a synthetic twin; a second `make demo` re-uses the finished stages.
demo: $(STAMP)
	$(VENV)/bin/lia-spark run --conf conf/demo.yaml

# Fast tier (kernels, config, small Spark stages); the end-to-end tier holds the tests marked e2e or slow.
FAST := not e2e and not slow

test: $(STAMP)
	$(PY) -m pytest -q tests -m "$(FAST)"

test-e2e: $(STAMP)
	$(PY) -m pytest -q tests -m "not ($(FAST))"

test-all: test test-e2e

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

# dist/lia_spark-*.whl for `spark-submit --py-files` or a Databricks cluster (executors also need the
# install_requires packages; pyspark only with the `spark` extra, clusters bring their own).
wheel: $(STAMP)
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .
	@ls dist/lia_spark-*.whl

clean:
	rm -rf runs dist build *.egg-info .pytest_cache mlflow.db mlruns
