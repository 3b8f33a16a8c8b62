"""Every registry entry (policies, solvers, bounders, CLI subcommands) resolves to code."""

from __future__ import annotations

import pytest

from optsched import cli
from optsched.policies import POLICIES, simulator_for
from optsched.problems import BOUNDERS, SOLVERS, bounder_for, solver_for


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_policy_resolves(name):
    assert callable(simulator_for(name))


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_solver_resolves(name):
    assert callable(solver_for(name))


@pytest.mark.parametrize("name", sorted(BOUNDERS))
def test_bounder_resolves(name):
    assert callable(bounder_for(name))


def test_every_command_registers():
    parser = cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices  # argparse keeps them here
    assert len(commands) == len(cli.COMMAND_MODULES)


def test_unknown_names_are_refused():
    with pytest.raises(KeyError, match="known"):
        solver_for("no-such-problem")
    with pytest.raises(KeyError, match="known"):
        simulator_for("no-such-policy")


def test_cli_starts_without_the_heavy_optional_libraries():
    """The vLLM venv installs optsched without dependencies: building the parser must not import
    matplotlib (or the solvers); each command loads what it needs when it runs."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('matplotlib', 'ortools', 'pulp', 'gurobipy', 'highspy'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from optsched import cli\n"
        "cli.build_parser()\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
