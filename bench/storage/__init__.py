"""Storage: verified on-disk caches, file locks, output folders and MLflow tracking."""
