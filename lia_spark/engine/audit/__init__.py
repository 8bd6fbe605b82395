"""The audit stage: the games' exact counts on the executors (:mod:`.counts`) and the bounds (:mod:`.stage`)."""
