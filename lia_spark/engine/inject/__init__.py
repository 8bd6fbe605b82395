"""The inject stage: the injected design's training set for a trainer outside this project (:mod:`.stage`)."""
