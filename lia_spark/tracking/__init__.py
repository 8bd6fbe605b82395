"""MLflow tracking (the only mlflow importer): pipeline, stage, setting and audit-table runs.
"""
