"""Tests of ``optsched.report``."""
