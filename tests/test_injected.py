"""Injected-label canaries (docs/math.md §5.9): draws, training labels, the game against a naive per-canary
implementation, and validity under a label-blind target."""
from __future__ import annotations

import numpy as np
import pytest

from lia_spark.kernels import audit, audit_sweep, bounds, canary_scores, injected


def _world(m: int, *, seed: int):
    rng = np.random.default_rng(seed)
    row_ids = rng.choice(10**12, size=m, replace=False).astype(np.int64)
    eta = rng.beta(0.6, 3.0, size=m)  # a skewed click probability, as on the twin
    label = (rng.random(m) < eta).astype(np.int8)
    proxy = np.clip(eta * np.exp(rng.normal(0.0, 0.3, m)), 1e-4, 1 - 1e-4)  # a fitted, imperfect proxy
    return row_ids, label, eta, proxy


def test_draws_are_keyed_on_the_row_id_and_have_their_distribution():
    row_ids, label, _, proxy = _world(50_000, seed=1)
    y1, coin = injected.injected_draws(row_ids, label, proxy, key=7)
    assert abs(coin.mean() - 0.5) < 0.01  # sd 0.0022
    assert abs(y1.mean() - proxy.mean()) < 0.01  # y1 ~ Bernoulli(M'(x))
    flat, _ = injected.injected_draws(row_ids, label, np.full(len(row_ids), 0.3), key=7)
    assert abs(np.corrcoef(flat, label)[0, 1]) < 0.02  # given M'(x), y1 does not look at y0 (sd 0.0045)
    order = np.random.default_rng(2).permutation(len(row_ids))  # another partitioning: same draws per row
    y1_again, coin_again = injected.injected_draws(row_ids[order], label[order], proxy[order], key=7)
    np.testing.assert_array_equal(y1_again, y1[order])
    np.testing.assert_array_equal(coin_again, coin[order])
    halves = [injected.injected_draws(row_ids[part], label[part], proxy[part], key=7)
              for part in (slice(0, 20_000), slice(20_000, None))]
    np.testing.assert_array_equal(np.concatenate([h[1] for h in halves]), coin)
    other, _ = injected.injected_draws(row_ids, label, proxy, key=8)
    assert (other != y1).any()


def test_flip_counterfactual_flips_a_share_of_the_labels():
    row_ids, label, _, proxy = _world(40_000, seed=3)
    y1, _ = injected.injected_draws(row_ids, label, proxy, key=1, counterfactual="flip", flip_share=0.1)
    assert abs((y1 != label).mean() - 0.1) < 0.006  # sd 0.0015
    with pytest.raises(ValueError, match="flip_share"):
        injected.injected_draws(row_ids, label, proxy, key=1, counterfactual="flip", flip_share=1.5)
    with pytest.raises(ValueError, match="counterfactual"):
        injected.injected_draws(row_ids, label, proxy, key=1, counterfactual="other")


def test_training_labels_are_the_shown_label():
    np.testing.assert_array_equal(injected.training_labels(np.array([0, 0, 1, 1]), np.array([1, 1, 0, 1]),
                                                           np.array([0, 1, 1, 0])), [0, 1, 0, 1])


def _naive_counts(row_ids, label, y1, coin, target, proxy, *, seed, guesses, score):
    """Per canary, by the definition: score s = A(y0) - A(y1) on informative canaries, rank by |s| (ties by the
    row id's tie hash), guess 0 if s > 0 else 1, count correct guesses among the top c'."""
    parsed = canary_scores.parse_score(score)
    rows = []
    for i in range(len(row_ids)):
        if label[i] == y1[i]:
            continue
        s = (canary_scores.label_scores(target[i:i + 1], proxy[i:i + 1], int(label[i]), kind=parsed.kind, t=parsed.t)[0]
             - canary_scores.label_scores(target[i:i + 1], proxy[i:i + 1], int(y1[i]), kind=parsed.kind, t=parsed.t)[0])
        tie = int(audit.tie_hashes(row_ids[i:i + 1], seed=seed)[0])
        rows.append((-abs(s), tie, int((0 if s > 0 else 1) == coin[i])))
    rows.sort()
    correct = np.cumsum([r[2] for r in rows])
    return np.array([correct[g - 1] for g in guesses])


@pytest.mark.parametrize("score", ["log_ratio", "difference_t2"])
def test_counts_equal_a_naive_per_canary_implementation(score):
    row_ids, label, eta, proxy = _world(3_000, seed=5)
    y1, coin = injected.injected_draws(row_ids, label, proxy, key=11)
    trained = injected.training_labels(label, y1, coin)
    target = np.clip(0.7 * proxy + 0.3 * trained, 1e-6, 1 - 1e-6)  # a model that memorised its training labels
    target[:50] = proxy[:50]  # |s| = 0: ties broken by the hash
    informative = int((label != y1).sum())
    guesses = audit.guess_grid(informative)
    counts = injected.count_correct(row_ids, label, y1, coin, target, proxy, seed=11, guesses=guesses,
                                    scores=[score])[score]
    assert counts.shape == (1, len(guesses))
    np.testing.assert_array_equal(counts[0], _naive_counts(row_ids, label, y1, coin, target, proxy, seed=11,
                                                           guesses=guesses, score=score))
    assert counts[0, 0] == 1 and counts[0, -1] > 0.8 * informative  # the memorising model is found


def test_the_bayes_score_is_the_log_likelihood_ratio_of_the_coin():
    # M = 0.8, M' = 0.4, y0 = 1: s = log(0.8/0.4) - log(0.2/0.6)
    s = injected.injected_scores(np.array([0.8]), np.array([0.4]), np.array([1]))
    np.testing.assert_allclose(s, [np.log(0.8 / 0.4) - np.log(0.2 / 0.6)], rtol=1e-12)


def test_bad_columns_name_the_field():
    ids, label = np.arange(3), np.array([0, 1, 0])
    p = np.full(3, 0.5)
    with pytest.raises(ValueError, match="hidden_bit"):
        injected.score_candidates(ids, label, label, np.array([0, 2, 0]), p, p, seed=1, scores=["log_ratio"])
    with pytest.raises(ValueError, match="counterfactual_label"):
        injected.score_candidates(ids, label, label[:2], label, p, p, seed=1, scores=["log_ratio"])


def test_a_label_blind_target_certifies_zero_in_at_least_95_percent_of_draws():
    """The null the observational design fails: a strong model that never saw the canaries' labels (here the true
    eta itself, the strongest label-blind model) with a fitted, imperfect proxy. The injected design, a fresh
    world, coin and counterfactual per draw, certifies eps > 0 in at most 5% of 200 draws (seen: 1); the
    observational game on the same worlds certifies eps > 0 in nearly every draw (seen: 50 of 50)."""
    positives = observational_positives = 0
    for draw in range(200):
        row_ids, label, eta, proxy = _world(4_000, seed=100 + draw)
        if draw < 20:
            everyone = audit.guess_grid(len(row_ids))
            observed = audit.count_correct_scores(row_ids, label, eta, proxy, seed=draw, repetitions=1,
                                                   guesses=everyone, scores=["log_ratio"])
            observational_positives += float(audit_sweep.evaluate_scores(
                observed, everyone, canaries=len(row_ids),
                families=("binomial",)).best["eps_binomial_bonferroni"][0]) > 0
        y1, coin = injected.injected_draws(row_ids, label, proxy, key=draw)
        informative = int((label != y1).sum())
        guesses = audit.guess_grid(informative)
        counts = injected.count_correct(row_ids, label, y1, coin, eta, proxy, seed=draw, guesses=guesses,
                                        scores=["log_ratio"])
        best = audit_sweep.evaluate_scores(counts, guesses, canaries=informative, families=("binomial",))
        positives += float(best.best["eps_binomial_bonferroni"][0]) > 0.0
    assert positives <= 10
    assert observational_positives >= 15  # the null is realistic: it fools the observational design


def test_a_memorising_target_is_bounded_by_its_randomized_response_epsilon():
    """Training on RR(y^b) at eps and predicting the released label exactly (the most revealing model of that
    release): the bound stays below eps and is positive."""
    from lia_spark.kernels import label_mechanisms

    epsilon = 2.0
    row_ids, label, eta, proxy = _world(60_000, seed=9)
    y1, coin = injected.injected_draws(row_ids, label, proxy, key=3)
    released = label_mechanisms.randomized_response(injected.training_labels(label, y1, coin), row_ids,
                                                    epsilon=epsilon, seed=4)
    keep = 1.0 / (1.0 + np.exp(-epsilon))  # P(released = shown)
    target = np.where(released == 1, keep, 1 - keep)  # the posterior of the shown label under a flat prior
    informative = int((label != y1).sum())
    guesses = audit.guess_grid(informative)
    counts = injected.count_correct(row_ids, label, y1, coin, target, np.full(len(row_ids), 0.5), seed=3,
                                    guesses=guesses, scores=["log_ratio"])
    eps_lb = audit_sweep.evaluate_scores(counts, guesses, canaries=informative,
                                          families=("binomial",)).best["eps_binomial_bonferroni"][0]
    assert 0.5 < eps_lb <= epsilon
    assert bounds.accuracy_of_epsilon(epsilon) == pytest.approx(keep)


def test_shadow_coins_are_paired_fresh_and_keyed_on_the_row_id():
    row_ids, label, _, proxy = _world(20_000, seed=3)
    _, coin = injected.injected_draws(row_ids, label, proxy, key=11)
    first, second, third = (injected.shadow_coins(row_ids, key=11, shadow=k) for k in (0, 1, 2))
    np.testing.assert_array_equal(first + second, 1)  # a pair: each canary trains on y0 in exactly one of the two
    assert abs(first.mean() - 0.5) < 0.02 and abs(third.mean() - 0.5) < 0.02
    for shadow in (first, third):  # fresh: neither the target's coins nor the other pair's
        assert abs(np.mean(shadow == coin) - 0.5) < 0.02
    assert abs(np.mean(first == third) - 0.5) < 0.02
    order = np.random.default_rng(0).permutation(len(row_ids))
    np.testing.assert_array_equal(injected.shadow_coins(row_ids[order], key=11, shadow=2), third[order])
    assert len({injected.shadow_seed(11, k) for k in range(8)} | {11}) == 9


def test_shadow_labels_take_y0_and_y1_but_no_coin_of_the_target():
    row_ids, label, _, proxy = _world(5_000, seed=4)
    y1, _ = injected.injected_draws(row_ids, label, proxy, key=5)
    canary = np.arange(len(row_ids)) % 3 != 0
    counterfactual = np.where(canary, y1, -1)
    labels = [injected.shadow_training_labels(label, counterfactual, row_ids, key=5, shadow=k) for k in range(4)]
    np.testing.assert_array_equal(labels[0][~canary], label[~canary])  # off the canaries: the true label
    both = (labels[0] + labels[1])[canary]
    np.testing.assert_array_equal(both, label[canary] + y1[canary])  # the pair trains once on y0, once on y1


def test_the_shadow_baseline_is_the_mean_logit():
    predictions = np.array([[0.1, 0.5, 1e-300], [0.9, 0.5, 1e-12]])
    np.testing.assert_allclose(injected.shadow_reference(predictions), [0.5, 0.5, 10 ** -13.5],  # clipped at 1e-15
                               rtol=1e-6)
    assert np.all(np.isfinite(injected.shadow_reference(np.array([[0.0, 1.0], [0.0, 1.0]]))))


def test_the_scores_read_neither_the_coin_nor_the_released_label():
    """What ranks the canaries is computed without hidden_bit and released_label (both reveal the coin on most
    informative canaries): the score keys of a batch without those columns equal the keys with them, and only the
    correctness bits (the audit's own bookkeeping) change when the coins are flipped."""
    import pandas as pd

    from lia_spark.kernels.audit_designs import INJECTED_DESIGN
    from lia_spark.kernels.canary_scores import resolve_scores

    row_ids, label, _, proxy = _world(4_000, seed=6)
    y1, coin = injected.injected_draws(row_ids, label, proxy, key=2)
    trained = injected.training_labels(label, y1, coin)
    target = np.clip(proxy + 0.2 * (2 * trained - 1), 0.01, 0.99)
    frame = pd.DataFrame({"row_id": row_ids, "label": label, "target_prediction": target, "proxy_prediction": proxy,
                          "counterfactual_label": y1, "hidden_bit": coin, "released_label": trained})
    frame = frame[frame["label"] != frame["counterfactual_label"]]
    blind = frame.drop(columns=["hidden_bit", "released_label"])
    for score in resolve_scores(("log_ratio", "difference_t2")):
        for found, expected in zip(INJECTED_DESIGN.batch_keys(blind, score, seed=2),
                                   INJECTED_DESIGN.batch_keys(frame, score, seed=2)):
            np.testing.assert_array_equal(found, expected)
    scores = resolve_scores(("log_ratio",))
    flipped = frame.assign(hidden_bit=1 - frame["hidden_bit"])
    ours, theirs = (INJECTED_DESIGN.batch_candidates(f, seed=2, repetitions=1, scores=scores)["log_ratio"]
                    for f in (frame, flipped))
    np.testing.assert_array_equal(ours.abs_score, theirs.abs_score)
    np.testing.assert_array_equal(ours.correct, 1 - theirs.correct)


def test_prediction_problems_name_what_is_wrong_and_pass_probabilities():
    """The checks of a model's predictions of the canaries (the audit stage's and the Python API's), on in-process
    summaries: each failure named, probabilities that follow the proxy pass."""
    from lia_spark.kernels.injected import prediction_problem, summarize_predictions

    rng = np.random.default_rng(5)
    proxy = rng.uniform(0.01, 0.5, 1000)
    good = np.clip(proxy + rng.normal(0, 0.05, 1000), 0.001, 0.999)
    assert prediction_problem(summarize_predictions(good, proxy, expected=1000)) is None
    found = summarize_predictions(good, proxy, expected=1000)
    assert found.low == good.min() and found.high == good.max() and found.soft == 1000
    assert found.agreement == pytest.approx(np.corrcoef(good, proxy)[0, 1], abs=1e-12)
    holes = good.copy()
    holes[:3] = np.nan
    cases = {"repeat": (good, 999), "no prediction (a missing row, null or NaN) for 3 of 1000": (holes, 1000),
             "range over [-0.5": (np.where(np.arange(1000) == 0, -0.5, good), 1000),
             "every prediction is 0 or 1": ((good > 0.25).astype(float), 1000),
             "fall as the proxy's P(y = 1) rises (correlation -": (1 - good, 1000)}
    for expected_text, (predictions, expected) in cases.items():
        problem = prediction_problem(summarize_predictions(predictions, proxy, expected=expected))
        assert problem is not None and expected_text in problem, (expected_text, problem)



def test_extra_runs_draw_their_own_fair_coins_and_distinct_keys():
    """audit.runs (docs/math.md §5.14): run r >= 1 draws fair coins of its own, independent of the target's, of the
    other runs' and of the shadows' (agreement near 1/2), deterministic in (seed, run, row id); pooled keys are
    distinct over (canary, run) pairs and run 0 keeps the row ids."""
    row_ids = (np.int64(23) << 40) | np.arange(40_000, dtype=np.int64)
    label = np.zeros(row_ids.size, dtype=np.int8)
    _, target_coin = injected.injected_draws(row_ids, label, np.full(row_ids.size, 0.5), key=9)
    runs = [injected.run_coins(row_ids, key=9, run=run) for run in (1, 2)]
    shadow = injected.shadow_coins(row_ids, key=9, shadow=0)
    for coin in runs:
        assert abs(coin.mean() - 0.5) < 0.01 and set(np.unique(coin)) == {0, 1}
        for other in (target_coin, shadow):
            assert abs((coin == other).mean() - 0.5) < 0.01
    assert abs((runs[0] == runs[1]).mean() - 0.5) < 0.01
    np.testing.assert_array_equal(runs[0], injected.run_coins(row_ids, key=9, run=1))
    assert injected.run_seed(9, 1) != injected.run_seed(9, 2) != injected.shadow_seed(9, 2)
    keys = np.concatenate([injected.pooled_keys(row_ids, run) for run in range(3)])
    assert np.unique(keys).size == keys.size and (injected.pooled_keys(row_ids, 0) == row_ids).all()
    with pytest.raises(ValueError, match="run: the extra runs are numbered from 1"):
        injected.run_coins(row_ids, key=9, run=0)


def test_pooling_refuses_uneven_run_lists_and_row_ids_beyond_the_key_range():
    """Pooled keys run << 48 | row_id are distinct only for row ids in [0, 2^48) and runs of equal count
    (lia_spark.kernels.injected.pooling_problem, both audit paths)."""
    assert injected.pooling_problem(shortest=2, longest=2, lowest_row_id=0, highest_row_id=(1 << 48) - 1) is None
    assert "got 1 to 2" in injected.pooling_problem(shortest=1, longest=2, lowest_row_id=0, highest_row_id=5)
    assert "row_id must lie in [0, 2^48)" in injected.pooling_problem(shortest=2, longest=2, lowest_row_id=-1,
                                                                      highest_row_id=5)
    assert "row_id must lie" in injected.pooling_problem(shortest=2, longest=2, lowest_row_id=0,
                                                         highest_row_id=1 << 48)
