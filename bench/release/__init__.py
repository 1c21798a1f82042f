"""Images through a mechanism: guarded calls, secure streams, cached releases of datasets, face crops, folder releases."""
