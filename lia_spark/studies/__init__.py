"""Studies built on the kernels: the audit's validity study and the pure parts of the audit table.
"""
