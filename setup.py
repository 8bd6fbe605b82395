"""Package metadata for lia_spark: distributed label-privacy auditing on Apache Spark."""
import re
import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

XGBOOST_CPU = "xgboost-cpu>=2.1,<4"
MLFLOW = "mlflow>=2.21,<4"
# The supported pyspark: 3.5 (Databricks 15.4 and 16.4 LTS, EMR 7, Dataproc 2.2) to 4.x. The plain wheel declares
# no pyspark (a runtime's own must stay: pip would replace it); every command checks the range before Spark starts
# (lia_spark/run/requirements.py, which also holds MLflow to 2.21-3.x and its database store to a SQLAlchemy it can
# import). PyPI has no classifier for Spark versions: the range is stated here and in the README.
PYSPARK = "pyspark[connect]>=3.5,<5"
# The repository's conf/ ships as lia_spark/conf/ (lia_spark.run.packaged_configs reads it: `--conf demo`,
# `lia-spark config --init`); one copy in the repository, the wheel's made here.


class BuildWithConfigs(build_py):
    """build_py, plus conf/*.yaml copied into the built package's lia_spark/conf/."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "lia_spark" / "conf"
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted(Path(__file__).with_name("conf").glob("*.yaml")):
            shutil.copyfile(source, target / source.name)


setup(
    name="lia-spark",
    version=re.search(r'__version__ = "([^"]+)"', Path(__file__).with_name("lia_spark").joinpath("__init__.py")
                      .read_text(encoding="utf-8")).group(1),
    description="Label-inference auditing of label-privacy mechanisms (RR, LLP, noisy LLP) on Apache Spark",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["lia_spark", "lia_spark.*"]),
    # the JSON Schemas of the outputs; py.typed: the package's type hints are its API's (PEP 561)
    package_data={"lia_spark": ["py.typed"], "lia_spark.run": ["json_schemas/*.schema.json"]},
    # pyspark and xgboost are extras: a Databricks cluster or a spark-submit image provides its own, which a plain
    # `pip install lia-spark` must not replace (xgboost-cpu, the CPU build, installs under another name beside a
    # runtime's xgboost and overwrites its files). MLflow: the client (mlflow-skinny, which a runtime's full mlflow
    # includes) of MLflow 2.21 (Databricks ML runtime 16.4 LTS) to 3; the sqlite store and `mlflow server` need the
    # full mlflow (the `tracking` extra; `spark` brings it too).
    install_requires=[
        "pandas>=2.2,<3",
        "pyarrow>=15",
        "numpy>=1.26,<3",
        "scipy>=1.11",
        "numba>=0.60",
        "scikit-learn>=1.4",
        "mlflow-skinny>=2.21,<4",
        "pyyaml>=6",
        "matplotlib>=3.8",
        "dp-accounting>=0.4",
        "isal>=1.6",
    ],
    extras_require={
        "catboost": ["catboost>=1.2,<2"],
        "xgboost": [XGBOOST_CPU],
        "tracking": [MLFLOW],  # the local sqlite store (the default tracking URI) and `mlflow server`
        # a machine without Spark: what a cluster brings (Spark 3.5 LTS or 4.x; Spark Connect needs 4.x)
        "spark": [PYSPARK, XGBOOST_CPU, MLFLOW],
        # lightgbm: the tests log its classifiers (audit.model_uri reads the flavours of lia_spark.tracking.model_scoring)
        "dev": ["pytest>=8", "hypothesis>=6.100", "mpmath>=1.3", "pytest-timeout>=2.3", "pytest-xdist>=3.5",
                "psutil>=5.9", "jsonschema>=4.18", "ruff>=0.5", "lightgbm>=4",
                "mypy>=2.4,<2.5", "isort>=9,<10"],  # the gates of `make lint`: a newer one may find more
    },
    entry_points={"console_scripts": ["lia-spark=lia_spark.cli.main:main"]},
    cmdclass={"build_py": BuildWithConfigs},
)
