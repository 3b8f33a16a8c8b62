"""Benchmarks and studies, run on demand from the repository root:
``python -m tests.benchmarks.NAME`` (docs/development.md)."""
