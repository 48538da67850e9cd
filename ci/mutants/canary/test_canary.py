"""The canary suite: tests whose outcomes are known in advance, run through the conformance plugin exactly
as ``ironaccel certify`` runs the suite (``canary_check.py``). A plugin, results or judge mutant that records
any of them differently is killed. Each test cites its own clause so clause states can be checked too."""

import pytest

ATTEMPTS: dict[str, int] = {}


@pytest.fixture
def broken_setup():
    raise RuntimeError("this fixture fails on purpose")


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("this fixture's teardown fails on purpose")


@pytest.mark.clause("DEV-1")
def test_passes(device):
    assert device.info.backend


@pytest.mark.clause("MEM-1")
def test_fails():
    assert 1 == 2, "fails on purpose"


@pytest.mark.clause("MEM-2")
def test_passes_only_when_rerun():
    ATTEMPTS["rerun"] = ATTEMPTS.get("rerun", 0) + 1
    assert ATTEMPTS["rerun"] > 1, "the first attempt fails on purpose"


@pytest.mark.clause("MEM-3")
def test_fixture_fails(broken_setup):
    pass


@pytest.mark.clause("MEM-4")
def test_teardown_fails(broken_teardown):
    pass


@pytest.mark.clause("MEM-5")
def test_expected_failure_fails():
    assert False, "expected to fail (expectations: the clause id)"


@pytest.mark.clause("MEM-6")
def test_expected_failure_passes():
    pass


@pytest.mark.clause("COPY-1")
def test_skipped_by_expectation():
    assert False, "never runs (expectations: a test-id prefix)"


@pytest.mark.clause("COPY-2")
def test_not_supported(require):
    require("lang.wgsl")  # the fake libcuda compiles PTX and CUDA C++ only


@pytest.mark.clause("COPY-3")
def test_known_flaky_fails():
    assert False, "fails every time; the expectations file calls it flaky"
