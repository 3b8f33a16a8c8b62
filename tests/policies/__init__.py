"""Tests of ``optsched.policies``."""
