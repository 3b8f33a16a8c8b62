"""Every registry entry (policies, solvers, bounders, CLI subcommands) resolves to code."""

from __future__ import annotations

import json

import pytest

from optsched import cli
from optsched.policies import POLICIES, simulator_for
from optsched.problems import BACKENDS, BOUNDERS, SOLVERS, bounder_for, check_backend, solver_for
from tests.support.paths import INSTANCES


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
    # argparse lists a parser's subcommands only in its private _subparsers
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001
    assert len(commands) == len(cli.COMMANDS)


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


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_cli_json(capsys, *argv) -> tuple[int, dict]:
    code, out, _ = run_cli(capsys, *argv, "--json")
    return code, json.loads(out)


@pytest.mark.parametrize("problem", sorted(BACKENDS))
def test_solver_a_problem_cannot_use_is_bad_input(capsys, tmp_path, problem):
    """Every registered problem: a backend outside its table is exit 2 naming it, before any work
    (no schedule written), for solve and bound alike; the table names only registered problems."""
    assert set(BACKENDS) <= set(SOLVERS)
    out = tmp_path / "s.json"
    for name in sorted({"cpsat", "highs", "cbc", "gurobi", "nosuch"} - set(BACKENDS[problem])):
        code, _, err = run_cli(capsys, "solve", "toy-4", "--problem", problem, "--solver", name, "--out", out)
        assert code == 2 and f"no backend {name!r}" in err and problem in err and not out.exists()
        if problem in BOUNDERS:
            code, _, err = run_cli(capsys, "bound", "toy-4", "--problem", problem, "--solver", name)
            assert code == 2 and f"no backend {name!r}" in err


def test_check_backend_accepts_the_table_and_the_default():
    for problem, names in BACKENDS.items():
        check_backend(problem, None)
        for name in names:
            check_backend(problem, name)
    check_backend("fake", "anything")  # a problem without a table decides itself
    with pytest.raises(ValueError, match="known: highs, cbc, gurobi"):
        check_backend("hybrid", "cpsat")


def test_hybrid_offline_method_and_mip_backend_are_checked(capsys):
    code, _, err = run_cli(capsys, "solve", "toy-4", "--problem", "hybrid-offline", "--method", "nosuch")
    assert code == 2 and "option 'method'" in err and "nosuch" in err
    code, _, err = run_cli(
        capsys, "solve", "toy-4", "--problem", "hybrid-offline", "--method", "mip", "--solver", "cpsat"
    )
    assert code == 2 and "needs a MIP backend" in err
    code, res = run_cli_json(
        capsys, "solve", "toy-4", "--problem", "hybrid-offline", "--method", "mip", "--solver", "cbc"
    )
    assert code == 0 and res["status"] == "optimal" and res["solver"] == "mip-cbc"


STATIC_FIG3 = INSTANCES / "static" / "fig3-slo-order.json"


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["toy-4", "--problem", "hybrid", "--warm-start", "nosuch"],
            "option 'warm_start': unknown hybrid policy 'nosuch'",
        ),
        (["toy-4", "--problem", "hybrid-offline", "--option", "lengths=nosuch"], "option 'lengths': unknown 'nosuch'"),
        (["toy-4", "--problem", "hybrid", "--option", "bins=abc"], "option 'bins': must be an integer >= 1"),
        (
            [str(STATIC_FIG3), "--problem", "gmax", "--method", "sa", "--option", "iters=abc"],
            "option 'iters': must be an integer",
        ),
        (["toy-4", "--problem", "infermax", "--option", "threads=abc"], "--option threads: not an integer"),
        (
            ["toy-4", "--problem", "infermax", "--option", "time_limit=-1"],
            "--option time_limit: must be a finite number > 0",
        ),
        (
            [str(STATIC_FIG3), "--problem", "gmax", "--option", "exact_method=nosuch"],
            "option 'exact_method': unknown 'nosuch'",
        ),
    ],
)
def test_unknown_option_values_are_bad_input(capsys, argv, needle):
    """Unknown option values are bad input (exit 2 naming the option), not internal errors (exit 3)."""
    code, out, err = run_cli(capsys, "solve", *argv)
    assert code == 2 and needle in err and out == ""


def test_unknown_hybrid_bound_method_is_bad_input(capsys):
    code, out, err = run_cli(capsys, "bound", "toy-4", "--problem", "hybrid", "--method", "nosuch")
    assert code == 2 and "option 'method': unknown 'nosuch'" in err and out == ""


def test_backend_table_names_the_mip_backends_of_mipsolvers():
    """``BACKENDS`` is written out (importing mipsolvers would load PuLP at CLI start): its MIP
    names must be exactly the adapter's."""
    from optsched.mipsolvers import MIP_BACKENDS

    for problem, names in BACKENDS.items():
        assert set(names) - {"cpsat"} == set(MIP_BACKENDS), problem


def test_a_named_command_imports_its_own_module_only(capsys):
    """``optsched simulate ...`` imports neither ``report`` nor ``sweep`` (start-up time it never
    uses); ``--help`` and usage errors still list every command."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from optsched import cli\n"
        "assert cli.main(['simulate', 'toy-4', '--policy', 'vllm', '--quiet']) == 0\n"
        "names = [m for m in sys.modules if m.startswith('optsched.commands.')]\n"
        "print(sorted(set(names) - {'optsched.commands._common'}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "['optsched.commands.simulate']"
    code, _, err = run_cli(capsys, "no-such-command")
    assert code == 2 and "'sweep-report'" in err and "'simulate'" in err
