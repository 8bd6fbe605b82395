"""The log-loss attack against a Spark oracle (:mod:`.stage`)."""
