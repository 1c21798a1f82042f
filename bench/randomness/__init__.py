"""Randomness: counter-based random numbers, derived seeds and per-image streams."""
