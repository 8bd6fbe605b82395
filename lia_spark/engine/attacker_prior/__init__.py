"""The attacker's prior, shared by the stage that writes it (train: the proxy's scores of the released days) and the
stages that read it (posteriors, inject): :mod:`.sources` says which table and column the prior comes from and scores
the released days with the proxy on the executors. It sits above :mod:`lia_spark.engine.models` (whose feature frames
and scoring it uses) and below the stages; it imports no stage."""
