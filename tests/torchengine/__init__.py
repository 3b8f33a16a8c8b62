"""Tests of ``optsched.torchengine``."""
