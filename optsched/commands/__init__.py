"""One module per ``optsched`` subcommand; each exposes ``register(subparsers)`` (see optsched.cli)."""
