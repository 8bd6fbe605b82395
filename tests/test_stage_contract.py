"""The stage contract: what a stage reads of the stage that wrote its input."""
from __future__ import annotations

import pytest


def test_a_stage_reads_its_upstream_result_through_the_protocol_it_needs():
    """The audit reads the train stage's result as a TrainedTarget; a writer whose result does not offer it fails
    naming the input, and a table the user gave (no writer's result) reads as None."""
    from lia_spark.engine.runtime.stage import StageRun, TrainedTarget
    from lia_spark.engine.train.stage import TrainResult

    def run_with(result: object) -> StageRun:
        return StageRun(None, None, "", None, 0.0, {}, lambda role: result, None)

    class Trained:
        def claimed_privacy(self) -> tuple[str, float]:
            return "rr", 2.0

    assert issubclass(TrainResult, TrainedTarget)  # what the train stage writes offers it
    trained = Trained()
    assert run_with(trained).upstream("canaries", TrainedTarget) is trained
    assert run_with(None).upstream("canaries", TrainedTarget) is None
    with pytest.raises(TypeError, match="input 'canaries': its writer's result dict does not offer TrainedTarget"):
        run_with({"mechanism": "rr"}).upstream("canaries", TrainedTarget)
