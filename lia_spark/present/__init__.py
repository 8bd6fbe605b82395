"""What a reader sees: plots, findings and the HTML report (the only matplotlib importers); the records they show
(the audit summary, its headline) are in :mod:`lia_spark.records`.
"""
