"""Tests of ``optsched.problems.aladdin``."""
