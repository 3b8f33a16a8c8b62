"""Tests of ``optsched.problems``."""
