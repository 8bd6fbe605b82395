"""The generate stage: the synthetic Criteo twin (:mod:`.stage`)."""
