"""Tests of ``optsched.executor``."""
