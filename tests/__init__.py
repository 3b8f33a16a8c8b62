"""The tests of optsched; their layout mirrors the package (docs/development.md)."""
