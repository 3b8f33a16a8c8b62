"""Tests of ``optsched.export``."""
