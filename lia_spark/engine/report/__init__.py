"""The report step: the HTML page of a pipeline run (:mod:`.stage`)."""
