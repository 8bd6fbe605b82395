"""Running lia_spark: the validated configuration, the output layout, fingerprints, failure lines and the
command line.
"""
