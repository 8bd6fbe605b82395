"""The vocabulary of lia_spark, defined once: mechanism names, the setting key, the columns of the tables the stages
write, score, convention and bound names, audit games and designs, the bag-size limit and the boosting defaults. No
imports: every ring may import it.

Each word means one thing: an *attack* is what the audit plays (audit.attack: label inference or the membership
baseline) or one of the log-loss attacks; a *score* ranks the canaries (audit.scores: ``log_ratio``,
``difference_t<t>``; its *kind* is difference or log ratio); a *design* is how the canaries' labels come about
(injected or observational); a *setting* is one cell of a mechanism grid (mechanism, epsilon, bag size); a
*section* is one part of the configuration.
"""

# Release mechanisms (docs/math.md §2) whose posteriors the posteriors stage computes.
RR = "rr"
LLP = "llp"
LLP_LAPLACE = "llp_laplace"
LLP_GEOMETRIC = "llp_geometric"
BAG_MECHANISMS = (LLP, LLP_LAPLACE, LLP_GEOMETRIC)  # release one value per bag of k rows
POSTERIOR_MECHANISMS = (RR, *BAG_MECHANISMS)

# Training mechanisms of the target (docs/math.md §2.6); their facts are in lia_spark.kernels.mechanism_registry.
NONE = "none"  # the true labels (epsilon = infinity)
RR_WITH_PRIOR = "rr_with_prior"
LP_2ST = "lp_2st"
RR_DEBIASED = "rr_debiased"
PATE = "pate"  # teachers on disjoint partitions, a student on noisy vote labels (docs/math.md §4.6)

# Model libraries (models.library) and execution paths (models.execution).
XGBOOST, CATBOOST = "xgboost", "catboost"  # their facts are in lia_spark.kernels.model_libraries
IN_MEMORY, DISTRIBUTED = "in_memory", "distributed"
EXECUTIONS = (IN_MEMORY, DISTRIBUTED)

# The key of one setting (a cell of a mechanism grid): columns of the posteriors' rows, summaries, utility table.
MECHANISM, EPSILON, BAG_SIZE = "mechanism", "epsilon", "bag_size"
SETTING_KEY = (MECHANISM, EPSILON, BAG_SIZE)


def setting_key(mechanism: str, epsilon: float, bag_size: int) -> str:
    """The one name of a setting, ``<mechanism>.eps<e>.k<k>`` (``rr.eps1.k1``, ``llp_laplace.eps0.5.k8``): MLflow run
    names, metric prefixes (``<key>.<statistic>``) and the report. Plain LLP (epsilon NaN: no noise) is ``eps inf``,
    like an infinite epsilon. No ``=``: MLflow metric names do not allow it, and Spark reads ``a=b`` folders as
    partitions."""
    value = float(epsilon)
    text = "inf" if value != value else f"{value:g}"
    return f"{mechanism}.eps{text}.k{int(bag_size)}"

# Bags: the posterior kernel keeps a (k+1) x (k+2) float64 table of forward messages, exact up to this size.
MAX_BAG_SIZE = 4096

# Columns of the tables the stages write and read (docs/layout.md).
ROW_ID = "row_id"  # the stable id of a Criteo row: day and position in its day (docs/math.md §1.1)
# row_id = day * 2^40 + position of the line in its source file: stable under any partitioning.
POSITION_BITS = 40
MAX_DAY = 24
RUN_KEY_SHIFT = 48  # pooled canary keys: run << 48 | row_id (row ids are day << 40 | position, day < 2^8)
LABEL = "label"  # the click label y (the true label y0 in the canary table)
DAY = "day"
SPLIT = "split"  # 0 train, 1 validation, 2 test, 3 left out (membership non-members)
RELEASED_LABEL = "released_label"  # the target's training label after its mechanism (null for bag releases)
TARGET_PREDICTION = "target_prediction"  # M(x)
PROXY_PREDICTION = "proxy_prediction"  # M'(x)
MEMBER = "member"  # membership baseline: 1 member, 0 left out, null off the candidates
COUNTERFACTUAL_LABEL = "counterfactual_label"  # injected design: y1
HIDDEN_BIT = "hidden_bit"  # injected design: the coin b (the target trains on y^b)
REFERENCE_PREDICTION = "reference_prediction"  # observational design: the label-blind reference's prediction
SHADOW_PREDICTION = "shadow_prediction"  # injected design: the baseline of the label-blind shadow fits
TRUE_LABEL = "true_label"  # the distributed path keeps y0 here while the mechanisms read y^b in the label column
INJECTED_LABEL = "injected_label"  # PATE's teachers: the training label where injection changed it
BAG_PROPORTION = "bag_proportion"  # a row's released bag proportion (the distributed bag target)
INJECTED_COLUMNS = (COUNTERFACTUAL_LABEL, HIDDEN_BIT)  # y1 and b in the canary table (null off the canaries)
# audit.runs > 1: per canary the coins b and the predictions of the extra training runs 1..R-1 (null without them)
RUN_HIDDEN_BITS, RUN_TARGET_PREDICTIONS = "run_hidden_bits", "run_target_predictions"
RUN_COLUMNS = (RUN_HIDDEN_BITS, RUN_TARGET_PREDICTIONS)
CANARY_COLUMNS = (ROW_ID, LABEL, RELEASED_LABEL, TARGET_PREDICTION, PROXY_PREDICTION, *INJECTED_COLUMNS,
                  REFERENCE_PREDICTION, SHADOW_PREDICTION, *RUN_COLUMNS)  # models/canaries: the target's training rows
MEMBERSHIP_COLUMNS = (ROW_ID, LABEL, MEMBER, TARGET_PREDICTION, PROXY_PREDICTION)  # models/membership
AUDITED_COLUMNS = (ROW_ID, LABEL, TARGET_PREDICTION, PROXY_PREDICTION)  # what every audit design reads

# The attacker's prior column (mechanisms.prior_column).
AUTO_PRIOR = "auto"  # eta on the synthetic twin, the proxy's prediction otherwise
TRUE_PRIOR = "eta"  # the twin's true P(y=1|x)
PROXY_PRIOR = PROXY_PREDICTION  # the proxy model's prediction

# Days the posteriors stage releases (mechanisms.days), besides a list of day numbers.
TARGET_DAY = "target"  # models.target_day alone
ALL_DAYS = "all"  # every day of the data table
DAY_SELECTIONS = (TARGET_DAY, ALL_DAYS)

# Audit attacks (audit.attack): observational label inference (docs/math.md §5) or the membership baseline (§5.8).
LABEL_INFERENCE = "label_inference"
MEMBERSHIP = "membership"
ATTACKS = (LABEL_INFERENCE, MEMBERSHIP)

# Audit scores (docs/math.md §5 step 2), conventions and bound families (docs/math.md §6).
DIFFERENCE = "difference"
LOG_RATIO = "log_ratio"
SCORES = (DIFFERENCE, LOG_RATIO)
PAPER = "paper"  # best sweep point, each at the full confidence: not a valid bound
BONFERRONI = "bonferroni"  # confidence split over every sweep point: the valid bound
CONVENTIONS = (PAPER, BONFERRONI)
BINOMIAL = "binomial"
GDP = "gdp"
BOUND_FAMILIES = (BINOMIAL, GDP)


DIFFERENCE_PREFIX = f"{DIFFERENCE}_t"  # difference_t<t>: the difference score with exponent t


def score_parts(name: str) -> tuple[str, float]:
    """(score, t) of a score name of audit.scores: ``log_ratio`` -> (log_ratio, 0.0), ``difference_t<t>`` ->
    (difference, t) for a finite number t >= 0.

    Raises:
        ValueError: naming the score when it is neither form, or t is negative or not finite.
    """
    if name == LOG_RATIO:
        return LOG_RATIO, 0.0
    if not (isinstance(name, str) and name.startswith(DIFFERENCE_PREFIX)):
        raise ValueError(f"score must be 'log_ratio' or 'difference_t<t>' with a number t >= 0 (e.g. "
                         f"difference_t2, {LOG_RATIO}), got score={name!r}")
    try:
        t = float(name[len(DIFFERENCE_PREFIX):])
    except ValueError:
        t = float("nan")
    if not (t >= 0.0 and t != float("inf")):
        raise ValueError(f"score {name!r}: t must be a finite number >= 0, got t={t}")
    return DIFFERENCE, t


def bound_key(family: str, convention: str) -> str:
    """Name of a best-over-the-sweep bound in the audit's results: ``eps_<family>_<convention>``."""
    return f"eps_{family}_{convention}"


# Gradient-boosting defaults (models.* and lia_spark.kernels.model_libraries.BoostingParams).
N_ESTIMATORS = 200
MAX_DEPTH = 6
LEARNING_RATE = 0.1
EARLY_STOPPING_ROUNDS = 20

# Audit designs (audit.design, docs/math.md §5.9): labels injected before training (valid for any proxy), or the
# observational game on a given model (valid only if the proxy is within TV tau of the truth).
INJECTED = "injected"
OBSERVATIONAL = "observational"
DESIGNS = (INJECTED, OBSERVATIONAL)
# Injected counterfactual labels (audit.counterfactual): y1 ~ M'(x), or y1 = 1 - y0 on a share of the canaries.
PROXY_DRAW = "proxy"
UNIFORM_FLIP = "flip"
COUNTERFACTUALS = (PROXY_DRAW, UNIFORM_FLIP)
# Label-free recalibration before scoring (audit.recalibrate, docs/math.md §5.11): none; the target mapped onto the
# baseline's scale, g(M) = E[M' | M]; the baseline mapped onto the target's, h(M') = E[M | M']; or auto: the proxy
# mapped (h), the shadows left as they are (the target's own pipeline, already on its scale).
RECALIBRATE_NONE, RECALIBRATE_TARGET, RECALIBRATE_PROXY, RECALIBRATE_AUTO = "none", "target", "proxy", "auto"
RECALIBRATIONS = (RECALIBRATE_AUTO, RECALIBRATE_NONE, RECALIBRATE_TARGET, RECALIBRATE_PROXY)
# The predictions the injected game's scores compare the target's with (audit.baseline, docs/math.md §5.13): auto,
# the shadow fits' where the canary table holds them, else the proxy's; both, each of the two, the confidence split
# over them; the proxy's alone; or the shadows' alone (refused without them). Their names in score names.
BASELINE_AUTO, BASELINE_BOTH, BASELINE_PROXY, BASELINE_SHADOWS = "auto", "both", "proxy", "shadows"
BASELINES = (BASELINE_AUTO, BASELINE_BOTH, BASELINE_PROXY, BASELINE_SHADOWS)
BASELINE_NAMES = {PROXY_PREDICTION: BASELINE_PROXY, SHADOW_PREDICTION: BASELINE_SHADOWS}
GEOMETRIC, LINEAR = "geometric", "linear"  # audit.sweep: the guess counts c' of the sweep (docs/math.md §5.3)
SWEEPS = (GEOMETRIC, LINEAR)
