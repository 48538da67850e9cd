"""Figures that tests measure (``record_property``: the farm's scheduling overhead per task), printed in the
terminal summary, so a CI log shows them without ``-s`` (with xdist too: the properties travel in the reports)."""


def pytest_terminal_summary(terminalreporter) -> None:
    figures = [(report.nodeid, name, value) for reports in terminalreporter.stats.values() for report in reports
               if getattr(report, "when", None) == "call" for name, value in getattr(report, "user_properties", ())]
    if figures:
        terminalreporter.section("measured by the tests")
        for nodeid, name, value in figures:
            terminalreporter.line(f"{name}: {value}  ({nodeid.split('::')[-1]})")
