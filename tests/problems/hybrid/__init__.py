"""Tests of ``optsched.problems.hybrid``."""
