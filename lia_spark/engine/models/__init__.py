"""Model fitting shared by the stages and commands that train (train, utility, the audit table): hyper-parameters,
rows and feature frames (:mod:`.preparation`, :mod:`.feature_frames`), the train stage's two execution paths
(:mod:`.execution`: in memory, or on the executors with xgboost.spark in :mod:`.distributed`), bag releases
(:mod:`.bags`), PATE's teachers (:mod:`.pate_teachers`) and parallel fits as Spark tasks (:mod:`.parallel_fits`).
It never imports a stage; the attacker's prior that train and posteriors share is
:mod:`lia_spark.engine.attacker_prior`."""
