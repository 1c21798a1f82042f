"""Grid suites (YAML): benchmarks x mechanisms x parameter lists x seeds x profile; see bench.scale.grid."""
