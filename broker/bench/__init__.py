"""Benchmarks anyone can re-run (`kafkactl bench …`); figures, never timed assertions in tests."""
