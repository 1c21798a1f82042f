"""The vocabulary every layer speaks: interfaces, registry, parameters, profiles, claims, results, scores, keys."""
