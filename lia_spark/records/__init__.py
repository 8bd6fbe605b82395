"""The typed records the stages write and every reader reads: the audit summary, its headline and the words both
print (bounds, ceilings, the claimed epsilon). Below everything that reads them (the stages, the studies, the
presentation, tracking and the CLI); they import only the vocabulary and the kernels.
"""
