"""Tests of ``optsched.problems.scls``."""
