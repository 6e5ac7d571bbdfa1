"""What `gangsolve solve` loads: OR-Tools' CP-SAT without pandas (a second or more of start-up), same answers.

Each case runs in its own interpreter: which modules a process imports is only known in a fresh one.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

EXAMPLE = Path(__file__).parent.parent / "examples" / "tfjob-8.yaml"


def _python(code: str, *path: Path) -> str:
    prelude = f"import sys\nsys.path[:0] = {[str(p) for p in path]!r}\n"
    out = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _solve(tmp_path: Path, pandas_first: bool) -> tuple[dict, set[str]]:
    """`gangsolve solve -o json` on the users' TFJob as the console script runs it, and the packages it imported."""
    imported = tmp_path / f"imported-{pandas_first}.json"
    code = f"""
        import atexit, json
        {"import pandas" if pandas_first else ""}
        from gangsolve.cli import main
        atexit.register(lambda: open({str(imported)!r}, "w").write(json.dumps(sorted(sys.modules))))
        sys.argv = ["gangsolve", "solve", {str(EXAMPLE)!r}, "--scheduler-name", "kube-batchd", "-o", "json"]
        main()
    """
    plan = json.loads(_python(code))
    return plan, set(json.loads(imported.read_text()))


def _answer(plan: dict) -> dict:
    stages = [(s["name"], s["status"], s["objective"], s["bound"]) for s in plan["stages"]]
    return {k: v for k, v in plan.items() if k not in ("solveSeconds", "stages")} | {"stages": stages}


def test_solve_runs_cp_sat_without_importing_pandas_and_answers_as_with_it(tmp_path):
    plan, imported = _solve(tmp_path, pandas_first=False)
    assert "ortools.sat.python.cp_model" in imported
    assert "locality" in [s["name"] for s in plan["stages"]]  # a CP-SAT stage ran
    assert len(plan["bindings"]) == 8
    assert not {name for name in imported if name.split(".")[0] == "pandas"}
    usual, imported = _solve(tmp_path, pandas_first=True)
    assert "pandas" in imported
    assert _answer(plan) == _answer(usual)


def test_cp_sat_pandas_methods_still_work_once_pandas_is_imported():
    out = _python("""
        from gangsolve import cpsat_import
        cpsat_import.install()
        from ortools.sat.python import cp_model
        assert "pandas" not in sys.modules
        assert not isinstance([1], cp_model.pd.Series)  # a question that needs no pandas to answer
        assert "pandas" not in sys.modules
        import pandas as pd
        model = cp_model.CpModel()
        xs = model.new_int_var_series("x", pd.Index(["a", "b"]), 0, pd.Series([3, 5], index=["a", "b"]))
        model.maximize(xs.sum())
        solver = cp_model.CpSolver()
        assert solver.solve(model) == cp_model.OPTIMAL
        print(type(xs).__name__, list(solver.values(xs)))
    """)
    assert out.split() == ["Series", "[3,", "5]"]


def test_a_module_that_needs_more_of_pandas_at_load_is_imported_as_usual(tmp_path):
    (tmp_path / "needs_pandas.py").write_text("import pandas as pd\nEMPTY = pd.DataFrame()\n")
    out = _python(
        """
        from gangsolve import cpsat_import
        cpsat_import.install("needs_pandas")
        import needs_pandas
        print(type(needs_pandas.EMPTY).__name__, sys.modules["pandas"] is needs_pandas.pd)
        """,
        tmp_path,
    )
    assert out.split() == ["DataFrame", "True"]
