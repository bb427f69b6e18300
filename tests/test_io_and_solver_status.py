"""The atomic writer, and solver statuses mapped the same way for HiGHS and CBC."""
import os

import pulp
import pytest

from hardware_specs.errors import MeshcastError
from hardware_specs.fileio import check_output, write_text_atomic
from planners.ilp import ILPError, classify, solve


def test_atomic_write_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "r.txt"
    target.write_text("old")
    write_text_atomic(target, "new contents")
    assert target.read_text() == "new contents"
    assert [p.name for p in tmp_path.iterdir()] == ["r.txt"]
    assert oct(target.stat().st_mode & 0o777) != oct(0o600)     # not mkstemp's private mode


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "r.txt"
    target.write_text("old")

    def boom(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(MeshcastError, match="No space left"):
        write_text_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.txt"]


def test_check_output_refuses_inputs_and_missing_folders(tmp_path):
    src = tmp_path / "in.json"
    src.write_text("{}")
    with pytest.raises(MeshcastError, match="also an input"):
        check_output(str(src), "output", [str(src)])
    with pytest.raises(MeshcastError, match="does not exist"):
        check_output(str(tmp_path / "no" / "x.html"), "output")
    check_output(str(tmp_path / "fine.html"), "output", [str(src)])


@pytest.mark.parametrize("status,sol,expect", [
    (pulp.LpStatusInfeasible, pulp.LpSolutionInfeasible, "infeasible"),        # HiGHS
    (pulp.LpStatusInfeasible, pulp.LpSolutionNoSolutionFound, "infeasible"),   # CBC, integer infeasible
    (pulp.LpStatusUnbounded, pulp.LpSolutionUnbounded, "unbounded"),
    (pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound, "no_solution"),   # time limit, nothing found
    (pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible, "feasible"),        # time limit, unproven
    (pulp.LpStatusOptimal, pulp.LpSolutionOptimal, "optimal"),
])
def test_classify(status, sol, expect):
    assert classify(status, sol) == expect


def _problem(kind: str) -> pulp.LpProblem:
    p = pulp.LpProblem(f"t_{kind}", pulp.LpMinimize)
    x = pulp.LpVariable("x", 0, 10, cat=pulp.LpInteger)
    y = pulp.LpVariable("y", 0, 10, cat=pulp.LpInteger)
    p += x + y
    if kind == "lp_infeasible":
        p += x + y >= 30
    elif kind == "integer_infeasible":      # feasible as an LP (x + y = 1.5), not in integers
        p += 2 * x + 2 * y == 3
    else:
        p += x + 2 * y >= 3
    return p


@pytest.mark.parametrize("solver", ["highs", "cbc"])
@pytest.mark.parametrize("kind", ["lp_infeasible", "integer_infeasible"])
def test_infeasible_is_reported_as_infeasible(solver, kind):
    with pytest.raises(ILPError, match="infeasible"):
        solve(_problem(kind), solver=solver, time_limit_s=5)


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_optimal(solver):
    info = solve(_problem("ok"), solver=solver, time_limit_s=5)
    assert info.sol_status == "Optimal Solution Found" or "Optimal" in info.sol_status
    assert info.objective == pytest.approx(2.0)
