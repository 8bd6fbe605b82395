"""No two outputs of a run, nor an input and an output, share a place: the check before any work
(:func:`lia_spark.run.layout.check_paths_apart`) refuses the same path or one inside the other, naming both fields
and both paths, after resolving the spellings of a path; the defaults and a sensible layout of one's own pass."""
from __future__ import annotations

from pathlib import Path

import pytest

from lia_spark.engine.orchestration.registry import STAGES, step_stage
from lia_spark.run.checks import ConfigError, resolved_path
from lia_spark.run.config import config_from_dict
from lia_spark.run.layout import OUTPUT, check_paths_apart, placed_paths


def _config(tmp_path: Path, **sections: dict):
    return config_from_dict({"run": {"output_dir": str(tmp_path / "out")}, **sections})


@pytest.fixture
def criteo_day(tmp_path) -> Path:
    """A Criteo day file outside the output folder."""
    day = tmp_path / "raw" / "day_0"
    day.parent.mkdir()
    day.write_text("", encoding="utf-8")
    return day


def _refusal(config) -> str:
    with pytest.raises(ConfigError) as refused:
        check_paths_apart(config)
    return str(refused.value)


def test_the_quarantine_at_the_data_table_is_refused_naming_both(tmp_path, criteo_day):
    out = tmp_path / "out"
    line = _refusal(_config(tmp_path, data={"source": "criteo", "criteo_paths": [str(criteo_day)],
                                            "quarantine_path": f"{out}/data"}))
    assert line.startswith(f"data.quarantine_path: the quarantine of malformed lines must not be the same path as "
                           f"the data table of data.parquet_path ({out}/data)")
    assert line.endswith(f"got '{out}/data'; choose another data.quarantine_path or data.parquet_path (lia-spark "
                         "stopped before any work)")


def test_the_data_table_at_the_models_folder_is_refused_naming_both(tmp_path):
    out = tmp_path / "out"
    line = _refusal(_config(tmp_path, data={"parquet_path": f"{out}/models/"}))
    assert line.startswith(f"data.parquet_path: the data table must not be the same path as the models folder of "
                           f"run.output_dir ({out}/models)")


@pytest.mark.parametrize("sections, field, relation, other", [
    ({"data": {"parquet_path": "{out}/posteriors/data"}}, "data.parquet_path", "lie inside", "posteriors folder"),
    ({"data": {"parquet_path": "{root}"}}, "data.parquet_path", "hold", "truth folder"),
    ({"audit": {"predictions_path": "{out}/inject/predictions", "claimed_epsilon": 1}}, "audit.predictions_path",
     "lie inside", "inject folder"),
    ({"audit": {"model_uri": "file://{out}/models/mine", "claimed_epsilon": 1}}, "audit.model_uri", "lie inside",
     "models folder"),
    ({"audit": {"canary_path": "{out}/audit/canaries"}}, "audit.canary_path", "lie inside", "audit folder"),
    ({"mechanisms": {"prior_path": "{out}/report"}}, "mechanisms.prior_path", "be the same path as",
     "report folder"),
    ({"synthetic": {"write_tsv": True}, "data": {"parquet_path": "{out}/criteo"}}, "data.parquet_path",
     "be the same path as", "criteo folder"),
    ({"audit": {"key_path": "{out}/models/audit_key"}}, "audit.key_path", "lie inside", "models folder"),
])
def test_an_input_or_output_inside_another_output_is_refused(tmp_path, sections, field, relation, other):
    values = {section: {key: value.format(out=tmp_path / "out", root=tmp_path) if isinstance(value, str) else value
                        for key, value in items.items()} for section, items in sections.items()}
    line = _refusal(_config(tmp_path, **values))
    assert line.startswith(f"{field}: the ") and f"must not {relation} the {other} of run.output_dir" in line, line


def test_a_file_input_inside_an_output_folder_is_refused(tmp_path):
    """A row may be a file: a Criteo day file kept inside the models folder, which train's commit replaces."""
    day = tmp_path / "out" / "models" / "day_0"
    day.parent.mkdir(parents=True)
    day.write_text("", encoding="utf-8")
    line = _refusal(_config(tmp_path, data={"source": "criteo", "criteo_paths": [str(day)]}))
    assert line.startswith(f"data.criteo_paths: the Criteo input must not lie inside the models folder of "
                           f"run.output_dir ({tmp_path / 'out'}/models)"), line


def test_an_output_folder_inside_an_input_folder_is_refused(tmp_path, criteo_day):
    line = _refusal(config_from_dict({"run": {"output_dir": str(criteo_day.parent / "out")},
                                      "data": {"source": "criteo", "criteo_paths": [str(criteo_day.parent)]}}))
    assert line.startswith("data.criteo_paths: the Criteo input must not hold the data table of data.parquet_path")


def test_spellings_of_one_place_are_one_path(tmp_path, monkeypatch):
    """Relative and absolute, file: URIs, trailing slashes, '..' and symbolic links resolve to one path."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "link").symlink_to(out)
    monkeypatch.chdir(tmp_path)
    for spelling in ("out/models", f"file://{out}/models/", f"{out}/posteriors/../models", f"{tmp_path}/link/models",
                     "./link//models/"):
        assert resolved_path(spelling) == str(out / "models"), spelling
        line = _refusal(_config(tmp_path, data={"parquet_path": spelling}))
        assert line.startswith("data.parquet_path: the data table must not be the same path as the models folder")
    assert resolved_path("HDFS://nn:8020/a/./b/../c//") == "hdfs://nn:8020/a/c"
    assert resolved_path("dbfs:/a/b/") == resolved_path("dbfs:a/b") == "dbfs:/a/b"


def test_the_defaults_and_a_layout_of_ones_own_pass(tmp_path, criteo_day):
    check_paths_apart(config_from_dict({}))
    check_paths_apart(_config(tmp_path))
    check_paths_apart(_config(tmp_path, synthetic={"write_tsv": True}))
    own = tmp_path / "own"
    check_paths_apart(_config(tmp_path, data={"source": "criteo", "criteo_paths": [str(criteo_day.parent)],
                                              "parquet_path": str(own / "table"),
                                              "quarantine_path": str(own / "table-quarantine")},
                              audit={"predictions_path": str(own / "predictions"), "claimed_epsilon": 1}))
    out = tmp_path / "out"
    check_paths_apart(_config(tmp_path, audit={"canary_path": f"{out}/models/canaries"},  # where train writes them
                              mechanisms={"prior_path": f"{out}/truth"}))
    check_paths_apart(_config(tmp_path, audit={"model_uri": "models:/mine@champion", "claimed_epsilon": 1}))
    check_paths_apart(_config(tmp_path, data={"parquet_path": f"{out}/data2"}))  # a sibling, not inside


@pytest.mark.parametrize("sections", [{}, {"synthetic": {"write_tsv": True}},
                                      {"data": {"source": "criteo", "criteo_paths": ["{day}"]}}])
def test_every_folder_a_stage_writes_is_an_output_of_the_table(tmp_path, criteo_day, sections):
    """The table and the stages' declarations cannot drift apart: what any stage replaces or deletes (of the data
    step, the stage data.source chooses) is a row."""
    values = {section: {key: [str(criteo_day)] if key == "criteo_paths" else value for key, value in items.items()}
              for section, items in sections.items()}
    config = _config(tmp_path, **values)
    outputs = {resolved_path(row.path) for row in placed_paths(config) if row.role == OUTPUT}
    stages = [stage for stage in STAGES.values() if stage.step != "data" or stage is step_stage("data", config)]
    written = {resolved_path(path) for stage in stages for path in stage.written(config)}
    assert written and written - outputs == set()
