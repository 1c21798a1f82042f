"""One cell, end to end: plan, data, release, task, attacks, result, tracking."""
