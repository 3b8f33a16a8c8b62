"""Tests of ``optsched.sweep``."""
