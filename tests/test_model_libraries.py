"""The model-library registry (lia_spark/kernels/model_libraries.py): each library fits, saves, loads back and
predicts what it predicted, survives the pickling that ships it to executors, and is the one place a library's
name is compared: the rest of the package asks the object."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from source_scan import name_comparisons

from lia_spark import names
from lia_spark.kernels import model_libraries
from lia_spark.kernels.model_libraries import LIBRARIES, BoostingParams, library_of_file, model_library
from lia_spark.run.config import load_config

PACKAGE = Path(model_libraries.__file__).resolve().parent.parent
PARAMS = BoostingParams(n_estimators=30, max_depth=3, learning_rate=0.3, early_stopping_rounds=10, threads=1, seed=4)


def _rows(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"x": rng.standard_normal(n), "c": rng.integers(0, 4, n).astype(np.float64)})
    labels = (rng.random(n) < 1 / (1 + np.exp(-(2 * frame["x"] + (frame["c"] == 2))))).astype(np.int8)
    return frame, labels


@pytest.mark.parametrize("name", sorted(LIBRARIES))
def test_a_library_fits_saves_loads_and_predicts_the_same_probabilities(name, tmp_path):
    library = model_library(name)
    frame, labels = _rows(3000, seed=1)
    valid_frame, valid_labels = _rows(500, seed=2)
    cat = ["c"] if library.native_categoricals else []
    if library.native_categoricals:  # catboost reads categoricals as text or integers
        frame, valid_frame = (f.astype({"c": np.int64}) for f in (frame, valid_frame))
    x, valid_x = library.feature_values(frame, ["x", "c"]), library.feature_values(valid_frame, ["x", "c"])
    assert isinstance(x, pd.DataFrame) == library.native_categoricals
    fitted = library.fit(x, labels, valid_x, valid_labels, params=PARAMS, feature_names=["x", "c"], cat_features=cat)
    assert fitted.library is library
    predicted = fitted.predict(valid_x)
    assert np.all((predicted > 0) & (predicted < 1)) and np.corrcoef(predicted, valid_frame["x"])[0, 1] > 0.8

    path = Path(fitted.save(str(tmp_path / "model")))
    assert path.suffix == library.suffix and library_of_file(path) is library
    transform = fitted.output_transform()
    np.testing.assert_allclose(transform.probabilities(transform.raw_output(library.load(path), valid_x)), predicted,
                               rtol=1e-6)  # float32 model files

    shipped = pickle.loads(pickle.dumps(fitted))  # as the proxy reaches the executors
    assert shipped.library == library and hash(shipped.library) == hash(library)
    shipped.predict_with_threads(1)
    np.testing.assert_array_equal(shipped.predict(valid_x), predicted)


def test_only_xgboost_learns_from_bags_and_catboost_refuses_them_naming_the_field():
    assert [name for name, library in LIBRARIES.items() if library.bag_objective] == [names.XGBOOST]
    assert [name for name, library in LIBRARIES.items() if library.distributed] == [names.XGBOOST]
    bags = model_libraries.Bags(np.zeros(10, np.int64), np.array([0.5]))
    with pytest.raises(ValueError, match="^models.library: catboost has no proportion-matching objective"):
        model_libraries.CATBOOST_LIBRARY.fit(None, None, None, None, params=PARAMS, train_bags=bags, valid_bags=bags)


def test_the_config_names_a_library_once_and_an_unknown_one_fails_naming_the_field():
    catboost = load_config(None, ["models.library=catboost", "utility.bag_sizes=[]"])
    assert catboost.models.model_library is model_libraries.CATBOOST_LIBRARY
    assert load_config(None, []).models.model_library is model_libraries.XGBOOST_LIBRARY
    with pytest.raises(ValueError, match="models.library must be one of xgboost, catboost, got 'lightgbm'"):
        model_library("lightgbm")
    with pytest.raises(ValueError, match="models.library"):
        load_config(None, ["models.library=lightgbm"])


def _library_name_comparisons(path: Path, root: Path = PACKAGE) -> list[str]:
    """Comparisons of a library's name, as a string or as names.XGBOOST / CATBOOST."""
    return name_comparisons(path, set(LIBRARIES), {"XGBOOST", "CATBOOST"}, root)


def test_no_module_compares_a_library_name_outside_the_registry(tmp_path):
    found = [site for path in sorted(PACKAGE.rglob("*.py")) if path.name != "model_libraries.py"
             for site in _library_name_comparisons(path)]
    assert found == []
    sample = tmp_path / "sample.py"  # the scan finds each spelling of a comparison the registry replaced
    sample.write_text('a = m.library == "catboost"\nb = library != XGBOOST\nc = name in (names.CATBOOST, "x")\n',
                      encoding="utf-8")
    assert _library_name_comparisons(sample, tmp_path) == ["sample.py:1", "sample.py:2", "sample.py:3"]
