"""Tests of ``optsched.problems.infermax``."""
