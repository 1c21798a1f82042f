"""The machine and terminal a cell runs on: CPU threads, kernels, precision, memory, worker pools, devices, resource bounds, progress."""
