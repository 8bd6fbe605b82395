"""Model fitting shared by the stages and commands that train (train, utility, the audit table): hyper-parameters,
rows and feature frames (:mod:`.preparation`, :mod:`.feature_frames`), the train stage's two execution paths
(:mod:`.execution`: in memory, or on the executors with xgboost.spark in :mod:`.distributed`), bag releases
(:mod:`.bags`), PATE's teachers (:mod:`.pate_teachers`), parallel fits as Spark tasks (:mod:`.parallel_fits`) and
the proxy priors (:mod:`.priors`). It never imports a stage."""
