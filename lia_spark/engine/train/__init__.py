"""The train stage: proxy and target models and the canary table (:mod:`.stage`), test metrics computed on the
executors (:mod:`.metrics`)."""
