"""The audit designs' registry (lia_spark/kernels/audit_designs.py): one object per game that the configuration,
the train stage, the counts and the headline read, and no design name compared anywhere else."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from source_scan import name_comparisons

from lia_spark import names
from lia_spark.kernels import audit, injected
from lia_spark.kernels.audit_designs import (AUDIT_DESIGNS, INJECTED_DESIGN, MEMBERSHIP_DESIGN, OBSERVATIONAL_DESIGN,
                                             audit_design, played_game)
from lia_spark.kernels.canary_scores import resolve_scores
from lia_spark.run.config import load_config

PACKAGE = Path(__file__).resolve().parents[1] / "lia_spark"
GAME_NAMES = {names.INJECTED, names.OBSERVATIONAL, names.MEMBERSHIP, names.LABEL_INFERENCE}
GAME_IDENTIFIERS = {"INJECTED", "OBSERVATIONAL", "MEMBERSHIP", "LABEL_INFERENCE"}
# A train result read back from its marker states the attack it was trained for (its membership table's folder).
KNOWN_SITES = {"engine/train/stage.py"}


def _game_comparisons(path: Path, root: Path = PACKAGE) -> list[str]:
    return name_comparisons(path, GAME_NAMES, GAME_IDENTIFIERS, root)


def test_no_game_name_is_compared_outside_the_registry():
    """A design is looked up once (AuditConfig.audit_design, Headline.game) and asked: every other comparison with
    a game's name would be a dispatch that bypassed the registry."""
    found = [site for path in sorted(PACKAGE.rglob("*.py")) if path.name != "audit_designs.py"
             for site in _game_comparisons(path) if site.split(":")[0] not in KNOWN_SITES]
    assert found == []


def test_the_scan_finds_a_game_compared_by_name_or_constant(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('a = design == "injected"\nb = attack != names.MEMBERSHIP\nc = game in (OBSERVATIONAL, x)\n'
                      'd = kind == "informative"\n', encoding="utf-8")
    assert _game_comparisons(sample, tmp_path) == ["sample.py:1", "sample.py:2", "sample.py:3"]


def test_the_config_names_its_game_once():
    """audit.design under label inference, the membership baseline under audit.attack=membership (whatever the
    design), unknown names refused naming the field."""
    assert load_config(None, []).audit.audit_design is INJECTED_DESIGN
    assert load_config(None, ["audit.design=observational"]).audit.audit_design is OBSERVATIONAL_DESIGN
    for design in names.DESIGNS:
        assert played_game(names.MEMBERSHIP, design) is MEMBERSHIP_DESIGN
    with pytest.raises(ValueError, match=r"^audit.design: must be one of injected, observational, got 'shadow'"):
        played_game(names.LABEL_INFERENCE, "shadow")
    with pytest.raises(ValueError, match=r"^audit.attack: .* got 'inversion'"):
        played_game("inversion", names.INJECTED)
    with pytest.raises(ValueError, match=r"^audit game: .* got 'paper'"):
        audit_design("paper")
    assert list(AUDIT_DESIGNS) == [names.INJECTED, names.OBSERVATIONAL, names.MEMBERSHIP]


def test_what_each_game_adds_and_assumes():
    """The injected game: keyed coins, y1 and b in the canary table, refits, one game, no tau, every counted
    canary informative; observational: a reference, audit.repetitions games at audit.tau; membership: keyed
    candidates, one game, no tau, counted on the driver."""
    assert (INJECTED_DESIGN.keyed, INJECTED_DESIGN.canary_columns, INJECTED_DESIGN.refits_target) == (
        True, names.INJECTED_COLUMNS, True)
    assert (INJECTED_DESIGN.tau(0.05), INJECTED_DESIGN.repetitions(100), INJECTED_DESIGN.informative(9)) == (0.0, 1, 9)
    assert (OBSERVATIONAL_DESIGN.keyed, OBSERVATIONAL_DESIGN.canary_columns, OBSERVATIONAL_DESIGN.fits_reference) == (
        False, (), True)
    assert (OBSERVATIONAL_DESIGN.tau(0.05), OBSERVATIONAL_DESIGN.repetitions(100),
            OBSERVATIONAL_DESIGN.informative(9)) == (0.05, 100, 0)
    assert (MEMBERSHIP_DESIGN.keyed, MEMBERSHIP_DESIGN.draws_members, MEMBERSHIP_DESIGN.refits_target) == (
        True, True, False)
    assert (MEMBERSHIP_DESIGN.tau(0.05), MEMBERSHIP_DESIGN.repetitions(100)) == (0.0, 1)
    with pytest.raises(ValueError, match="membership game is not counted over a canary table"):
        MEMBERSHIP_DESIGN.batch_candidates({}, seed=1, repetitions=1, scores=resolve_scores(("log_ratio",)))


def test_each_game_counts_a_batch_with_its_own_kernel():
    """A batch of the canary table counted by the design equals its kernel called on the columns (exactly)."""
    rng = np.random.default_rng(3)
    row_ids = np.arange(500, dtype=np.int64) * 7 + 1
    label, proxy = rng.integers(0, 2, 500), rng.uniform(0.05, 0.95, 500)
    target = np.clip(proxy + rng.normal(0, 0.1, 500), 0.01, 0.99)
    y1, coin = injected.injected_draws(row_ids, label, proxy, key=5)
    batch = pd.DataFrame({names.ROW_ID: row_ids, names.LABEL: label, names.TARGET_PREDICTION: target,
                          names.PROXY_PREDICTION: proxy, names.COUNTERFACTUAL_LABEL: y1, names.HIDDEN_BIT: coin})
    scores = resolve_scores(("log_ratio", "difference_t2"))
    games = {OBSERVATIONAL_DESIGN: audit.score_candidates(row_ids, label, target, proxy, seed=4, repetitions=3,
                                                         scores=scores),
             INJECTED_DESIGN: injected.score_candidates(row_ids, label, y1, coin, target, proxy, seed=4,
                                                        scores=scores)}
    for design, expected in games.items():
        found = design.batch_candidates(batch, seed=4, repetitions=design.repetitions(3), scores=scores)
        assert list(found) == list(expected)
        for score in found:
            for field in ("abs_score", "tie", "active", "correct"):
                np.testing.assert_array_equal(getattr(found[score], field), getattr(expected[score], field))
    keys = INJECTED_DESIGN.batch_keys(batch, scores[0], seed=4)
    np.testing.assert_array_equal(keys[0], np.abs(injected.injected_scores(target, proxy, label, score=scores[0])))
    np.testing.assert_array_equal(keys[1], audit.tie_hashes(row_ids, seed=4))


def test_the_audited_target_is_chosen_once_from_the_config(tmp_path):
    """A model of your own (audit.model_uri or audit.predictions_path) is audited from the inject stage's sealed
    table, declared with its predictions table and without a reference; otherwise the train stage's (or a given)
    canary table; the membership baseline reads its candidates."""
    from lia_spark.engine.audit.targets import OwnModel, TrainedCanaries, audited_path, audited_target

    out = f"run.output_dir={tmp_path / 'out'}"
    trained, given = (load_config(None, [out, *extra]) for extra in ([], [f"audit.canary_path={tmp_path / 'c'}"]))
    own, predicted = (load_config(None, [out, extra]) for extra in (
        "audit.model_uri=runs:/abc/model", f"audit.predictions_path={tmp_path / 'p'}"))
    membership = load_config(None, [out, "audit.attack=membership"])
    assert [type(audited_target(c)) for c in (trained, given, own, predicted, membership)] == [
        TrainedCanaries, TrainedCanaries, OwnModel, OwnModel, TrainedCanaries]
    assert [audited_path(c) for c in (trained, given, own, membership)] == [
        str(tmp_path / "out" / "models" / "canaries"), str(tmp_path / "c"), str(tmp_path / "out" / "inject" / "sealed"),
        str(tmp_path / "out" / "models" / "membership")]
    assert [(i.role, i.producer(c)) for c in (trained, given) for i in audited_target(c).inputs(c)] == [
        ("canaries", "train"), ("canaries", "")]
    assert [i.role for i in audited_target(predicted).inputs(predicted)] == ["canaries", "predictions"]
    assert audited_target(trained).has_reference and not audited_target(own).has_reference
