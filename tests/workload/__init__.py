"""Tests of ``optsched.workload``."""
