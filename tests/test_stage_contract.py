"""The stage contract: what a stage reads of the stage that wrote its input."""
from __future__ import annotations

import pytest


def test_a_stage_reads_its_upstream_result_through_the_protocol_it_needs():
    """The audit reads the train stage's result as a TrainedTarget; a writer whose result does not offer it fails
    naming the input, and a table the user gave (no writer's result) reads as None."""
    from lia_spark.engine.runtime.stage import StageRun, TrainedTarget
    from lia_spark.engine.train.stage import TrainResult

    def run_with(result: object) -> StageRun:
        return StageRun(None, None, "", None, 0.0, None, lambda role: result, None)

    class Trained:
        def claimed_privacy(self) -> tuple[str, float]:
            return "rr", 2.0

    assert issubclass(TrainResult, TrainedTarget)  # what the train stage writes offers it
    trained = Trained()
    assert run_with(trained).upstream("canaries", TrainedTarget) is trained
    assert run_with(None).upstream("canaries", TrainedTarget) is None
    with pytest.raises(TypeError, match="input 'canaries': its writer's result dict does not offer TrainedTarget"):
        run_with({"mechanism": "rr"}).upstream("canaries", TrainedTarget)


def test_a_stage_takes_only_the_options_its_dataclass_declares():
    """The train stage takes ``preparation`` as a TrainOptions; an option no stage declares fails naming the stage and
    what it takes; the pipeline's offer reaches only the stage declaring it (the report)."""
    from lia_spark.engine.audit.stage import AUDIT
    from lia_spark.engine.models.preparation import Preparation
    from lia_spark.engine.report.stage import REPORT, ReportOptions
    from lia_spark.engine.runtime.stage import NoOptions
    from lia_spark.engine.train.stage import TRAIN, TrainOptions

    preparation = Preparation()
    assert TRAIN.options_from({"preparation": preparation}) == TrainOptions(preparation)
    assert TRAIN.options_from({}).preparation is None
    with pytest.raises(TypeError, match="stage 'train' takes no option 'canaries'; its options: preparation"):
        TRAIN.options_from({"canaries": None})
    with pytest.raises(TypeError, match="stage 'audit' takes no option 'canaries'; its options: none"):
        AUDIT.options_from({"canaries": None})
    offer = {"steps": ("data",), "mlflow_location": "http://tracking/#/runs/1"}
    assert AUDIT.accepted(offer) == {} and AUDIT.options_from(AUDIT.accepted(offer)) == NoOptions()
    assert REPORT.options_from(REPORT.accepted(offer)) == ReportOptions(("data",), "http://tracking/#/runs/1")
