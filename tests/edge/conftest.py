import sys


def pytest_terminal_summary(terminalreporter) -> None:
    """How many inputs the fuzz tests ran, and how each ended."""
    fuzz = sys.modules.get("tests.edge.test_fuzz")
    if fuzz is not None and fuzz.RAN:
        terminalreporter.write_line(fuzz.summary())
