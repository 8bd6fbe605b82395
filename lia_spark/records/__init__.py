"""The typed records the stages write and every reader reads: the audit summary, its headline and the words both
print (bounds, ceilings, the claimed epsilon), the log-loss attack's summary, and the machinery that turns records
into JSON and JSON Schemas (:mod:`.typed`). Below everything that reads them (the stages, the studies, the
presentation, tracking and the CLI); they import only the vocabulary and the kernels.
"""
