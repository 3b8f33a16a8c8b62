"""Tests of ``optsched.commands``."""
