"""Tests of ``optsched.problems.gmax``."""
