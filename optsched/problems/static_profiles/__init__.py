"""Static-batch latency profiles (``*.toml``) for :mod:`optsched.problems.static_latency`."""
