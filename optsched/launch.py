"""The ``optsched`` program (the console script and ``python -m optsched``).

The command line is imported here, inside the handling of Ctrl-C: an interrupt then ends the
program with one line and exit code 130, not a traceback. The command line's own import runs with
the signal held until it ends (:func:`optsched.interrupt.held_signals`: ``pydantic_core`` panics
when interrupted inside its import); the solvers' later imports take the signal at once, also when a
C extension's import turned the ``KeyboardInterrupt`` into an ``ImportError``
(:func:`optsched.interrupt.sigint_seen`) after printing it, which
:func:`optsched.interrupt.quiet_printed_interrupts` keeps silent. (The package's ``__init__`` loads
nothing until a name is used, so the import starts here.)
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> int:
    """Run the command line on ``sys.argv``; returns the exit code."""
    from .interrupt import EXIT_INTERRUPTED, held_signals, quiet_printed_interrupts, raise_on_sigint, sigint_seen

    raise_on_sigint()
    quiet_printed_interrupts()
    try:
        with held_signals():
            from .cli import main as cli_main

        return cli_main(quick_exit=True)
    except KeyboardInterrupt:
        pass
    except Exception:
        if not sigint_seen():  # an ImportError of our own, say: a bug, with its traceback
            raise
    print("optsched: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED
