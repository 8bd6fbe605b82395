# Two set-up commands: `make demo` (runs the pipeline on a synthetic twin) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' lia_spark/__init__.py)
WHEEL := dist/lia_spark-$(VERSION)-py3-none-any.whl
ENV_EXTRAS ?= xgboost,catboost

.PHONY: demo test test-unit test-spark test-e2e test-all oldest-pins oldest-install test-oldest \
	lint typecheck install bench wheel zip env clean

# pip byte-compiles what it installs (~25 s of CPU per venv), and that stays: where PYTHONDONTWRITEBYTECODE is set (as
# on the CI machines) Python writes no .pyc itself, so every test process would compile its imports anew (the CLI's:
# 6.1 s of CPU instead of 2.2 s; with --no-compile the e2e tier took 1105 s instead of ~1000).
$(STAMP): setup.py
	bash .ci/ensure-java
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,catboost,spark]'
	touch $(STAMP)

install: $(STAMP)

# The whole pipeline on a synthetic twin (its target: RR at claimed eps = 2), then that target beside the
# non-private one (a 2-cell audit table); a second `make demo` re-uses the finished stages and cells.
demo: $(STAMP)
	$(VENV)/bin/lia-spark run --conf conf/demo.yaml
	$(VENV)/bin/lia-spark audit-table --conf conf/demo.yaml

# Fast tier = the unit tier (no JVM: kernels, config, presentation; about 1.5 min) then the small Spark stages
# (tests using the `spark` fixture, marked `spark` by tests/conftest.py); the end-to-end tier holds the tests marked
# e2e or slow.
FAST := not e2e and not slow

# Each tier runs in TEST_WORKERS parallel pytest processes (pytest-xdist; 0: in this process), a test file per
# worker at a time (one worker for the files that share a pipeline run: tests/conftest.py), so module fixtures (a
# packed environment, a pipeline run) are built once; files in tests/conftest.py's order. One test keeps ~1.3 of 2
# cores busy (JVM start-ups, subprocesses, single-threaded Python), two use the rest; three were slower (898 s
# instead of 838 s for the e2e tier: the cores were already 88% busy).
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: test-unit test-spark

test-unit: $(STAMP)
	$(PYTEST) tests -m "not spark and $(FAST)"

test-spark: $(STAMP)
	$(PYTEST) tests -m "spark and $(FAST)"

# The gates a change must pass before its tests (CONTRIBUTING.md): pyflakes' checks (unused or undefined
# names and imports: the mistakes that break code no test reaches) and the project's line length (120) by ruff; the
# import order by isort (.isort.cfg), whose grid wrapping keeps the aligned continuation lines (ruff's import sorter
# writes one name per line; not the notebooks, whose Databricks cells each import what they show); the annotations by
# mypy (`make typecheck`).
LINTED := lia_spark jobs tests benchmarks notebooks
lint: $(STAMP) typecheck
	$(VENV)/bin/ruff check --select F,E501 --line-length 120 $(LINTED)
	$(VENV)/bin/isort --check-only --diff lia_spark jobs tests benchmarks

# lia_spark's annotations at mypy's defaults (mypy.ini): 0 errors, third-party packages without types read as Any.
typecheck: $(STAMP)
	$(VENV)/bin/mypy

test-e2e: $(STAMP)
	$(PYTEST) tests -m "not ($(FAST))"

test-all: test test-e2e

# The oldest supported stack (setup.py, README "Supported versions"; the newest is the main venv's), in a venv of its
# own: pyspark 3.5 (the latest 3.5.x: Databricks 15.4 and 16.4 LTS, EMR 7, Dataproc 2.2), MLflow 2.21 (Databricks ML
# 16.4 LTS) with the SQLAlchemy before 2.1 it needs (MLflow before 3.9 imports a pool class 2.1 removed), xgboost 2.x
# with a scikit-learn of its time (xgboost 2.1's sklearn estimators fail to save from scikit-learn 1.8 on) and pandas 2
# (pyspark 3.5's extras bring numpy 1.26, MLflow 2.21 pyarrow < 20). Its tests: the tiny pipeline (every
# stage, tracked) with its numbers held to the committed reference values the newest stack wrote, the MLflow tests,
# the notebooks, the audit of a model of your own and of each native flavour (OLDEST_TESTS). Its JVMs start without the tests' class
# archive, whose build (~30 s) would cost more than it saves here. OLDEST_SQLALCHEMY_21: SQLAlchemy 2.1 alone in a
# folder of its own, for the test that MLflow 2.21 refuses it up front (tests/test_requirements.py).
MLFLOW_OLDEST ?= 2.21.3
OLDEST_VENV ?= .venv-oldest
OLDEST_STAMP := $(OLDEST_VENV)/.installed
OLDEST_PINNED := $(OLDEST_VENV)/.pinned
OLDEST_SQLALCHEMY_21 := $(abspath $(OLDEST_VENV)/sqlalchemy-2.1)
OLDEST_PINS := 'mlflow==$(MLFLOW_OLDEST)' 'pyspark[connect]>=3.5,<3.6' 'sqlalchemy<2.1' 'xgboost-cpu>=2.1,<3' \
	'scikit-learn<1.6' 'pandas<3' 'protobuf<6'
OLDEST_TESTS := tests/test_reference_numbers.py tests/test_tracking.py tests/test_tracking_resilience.py \
	tests/test_notebooks.py tests/test_model_flavours.py tests/test_spark_capabilities.py tests/test_requirements.py

# That venv with the pinned packages only: they need nothing of this checkout (.ci/run installs them in the
# background while the main venv installs; pyspark 3.5 builds from its source distribution, about a minute of one
# core). The editable install (oldest-install) comes after, in the foreground: it writes this checkout's
# lia_spark.egg-info, as the main venv's install and the e2e tier's `make wheel` do.
oldest-pins: $(OLDEST_PINNED)

$(OLDEST_PINNED): Makefile
	test -x $(OLDEST_VENV)/bin/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST_VENV)/bin/python -m pip install --quiet $(OLDEST_PINS)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --no-deps --upgrade --target $(OLDEST_SQLALCHEMY_21) 'sqlalchemy>=2.1,<2.2'
	touch $(OLDEST_PINNED)

oldest-install: $(OLDEST_STAMP)

$(OLDEST_STAMP): setup.py $(OLDEST_PINNED)
	bash .ci/ensure-java
	$(OLDEST_VENV)/bin/python -m pip install --quiet -e '.[dev,catboost,spark]' $(OLDEST_PINS)
	$(OLDEST_VENV)/bin/python -c 'import mlflow; assert mlflow.__version__ == "$(MLFLOW_OLDEST)", mlflow.__version__'
	touch $(OLDEST_STAMP)

test-oldest: $(OLDEST_STAMP)
	LIA_TESTS_CLASS_ARCHIVE=off LIA_TESTS_SQLALCHEMY_21=$(OLDEST_SQLALCHEMY_21) \
		$(OLDEST_VENV)/bin/python -m pytest -q $(OLDEST_TESTS)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

# The cluster builds (README, "Running with spark-submit"); none needs Java or the dev environment.
# dist/lia_spark-VERSION-py3-none-any.whl: `pip install` it on a cluster or a Databricks workspace (pure Python; pip
# fetches setuptools into an isolated build environment; setuptools' build/ folder would carry deleted modules).
wheel:
	rm -rf build
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir dist .
	@echo $(WHEEL)

# dist/lia_spark-VERSION.zip for `spark-submit --py-files` where the executors' Python has the dependencies: the
# wheel's files under a name PySpark puts on the workers' path (only .zip, .egg and .py files of --py-files are).
zip: wheel
	cp $(WHEEL) dist/lia_spark-$(VERSION).zip
	@echo dist/lia_spark-$(VERSION).zip

# dist/lia_spark-env.tar.gz for `spark-submit --archives dist/lia_spark-env.tar.gz#environment` where they lack
# them: a venv of $(PYTHON) with the wheel and its dependencies (extras ENV_EXTRAS; pyspark comes from Spark),
# packed by venv-pack. Executors need the same Python at the same path (conda-pack ships Python itself).
env: wheel
	rm -rf dist/env-build dist/pack-tools dist/lia_spark-env.tar.gz
	$(PYTHON) -m venv dist/env-build
	dist/env-build/bin/python -m pip install --quiet --upgrade pip
	dist/env-build/bin/python -m pip install --quiet '$(WHEEL)[$(ENV_EXTRAS)]'
	$(PYTHON) -m venv dist/pack-tools
	dist/pack-tools/bin/python -m pip install --quiet venv-pack
	dist/pack-tools/bin/venv-pack --quiet --prefix dist/env-build --output dist/lia_spark-env.tar.gz
	rm -rf dist/env-build dist/pack-tools
	@echo dist/lia_spark-env.tar.gz

clean:
	rm -rf runs dist build *.egg-info .pytest_cache mlflow.db mlruns
