""".github/workflows/conformance.yml (where GitHub runs it): a job per target (simulated on hosted runners, hardware on self-hosted GPU
runners) and a final job that merges the results and regenerates STATUS.md."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from ironaccel.cts import results, targets
from ironaccel.backends import BUILTIN

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "conformance.yml"


@pytest.fixture(scope="module")
def jobs() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def builtin_standard(simulated: bool) -> set[str]:
    """The built-in backends' targets that CI always runs (drivers found only on one machine are not)."""
    return {name for name, t in targets.standard().items() if t.backend in BUILTIN and t.simulated == simulated}


def matrix_targets(job: dict) -> dict[str, str]:
    return {entry["target"]: entry["slug"] for entry in job["strategy"]["matrix"]["include"]}


def run_lines(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_every_simulated_target_has_a_hosted_job(jobs):
    job = jobs["simulated"]
    assert set(matrix_targets(job)) == builtin_standard(simulated=True)
    assert "self-hosted" not in str(job["runs-on"]) and job["strategy"]["fail-fast"] is False
    assert "ironaccel certify --target ${{ matrix.target }}" in run_lines(job)


def test_every_hardware_target_has_a_self_hosted_gpu_job(jobs):
    job = jobs["hardware"]
    assert set(matrix_targets(job)) == builtin_standard(simulated=False)
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    assert "ironaccel certify --target ${{ matrix.target }}" in run_lines(job)


def plugin_standard_targets(plugin: Path) -> set[str]:
    """The standard targets a plugin's ``ironaccel.drivers`` entry points declare (loaded from its folder)."""
    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"]["ironaccel.drivers"]
    assert set(declared) <= set(project["entry-points"]["ironaccel.backends"]), "drivers of a backend it lacks"
    names = set()
    for spec in declared.values():
        module, _, attr = spec.partition(":")
        source = importlib.util.spec_from_file_location(f"checkout_{module}", plugin / f"{module.replace('.', '/')}.py")
        loaded = importlib.util.module_from_spec(source)
        sys.modules[source.name] = loaded  # dataclasses look their module up there
        source.loader.exec_module(loaded)  # this checkout's copy, whatever copy of the plugin is installed
        names |= {t.name for t in getattr(loaded, attr)() if t.always}
    return names


def test_every_plugin_target_has_a_job_that_installs_the_plugin(jobs):
    job = jobs["plugins"]
    entries = job["strategy"]["matrix"]["include"]
    plugins = {entry["plugin"] for entry in entries}
    assert plugins == {str(p.relative_to(ROOT)) for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists()}
    for plugin in plugins:
        expected = plugin_standard_targets(ROOT / plugin)
        assert expected and {e["target"] for e in entries if e["plugin"] == plugin} == expected
    lines = run_lines(job)
    assert "pip install -e ${{ matrix.plugin }}" in lines
    assert lines.index("pip install -e ${{ matrix.plugin }}") < lines.index("ironaccel certify --target ${{ matrix.target }}")
    for other in ("tests", "status"):
        assert all(f"pip install -e {p}" in run_lines(jobs[other]) for p in plugins)


def test_artifact_names_are_the_results_file_names(jobs):
    for kind in ("simulated", "plugins", "hardware"):
        for target, slug in matrix_targets(jobs[kind]).items():
            assert results.file_name(target) == slug + ".json"
        upload = next(s for s in jobs[kind]["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
        assert upload["with"]["name"] == "results-${{ matrix.slug }}" and upload["if"] == "always()"


def test_final_job_merges_results_and_publishes_status(jobs):
    job = jobs["status"]
    assert set(job["needs"]) == {"simulated", "plugins", "hardware"} and job["if"] == "always()"
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
    assert download["with"]["pattern"] == "results-*"
    lines = run_lines(job)
    assert "ironaccel verify" in lines
    assert "ironaccel status --results results --output STATUS.md" in lines
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert "STATUS.md" in upload["with"]["path"]


def test_every_command_a_job_runs_exists_in_the_tree(jobs):
    """A step that names a script, a folder or an ironaccel verb that is not there fails only on GitHub: check here."""
    from ironaccel.cts import cli

    verbs = {name for action in cli.parser()._actions if isinstance(action, argparse._SubParsersAction)
             for name in action.choices}
    for name, job in jobs.items():
        for line in run_lines(job).splitlines():
            for word in line.replace("&&", " ").split():
                if word.startswith(("ci/", "plugins/", "conformance/", ".venv/bin/ironaccel")):
                    path = word.removeprefix(".venv/bin/")
                    assert path == "ironaccel" or (ROOT / path).exists(), f"job {name}: {word} is not in the tree"
            words = line.split()
            for i, word in enumerate(words[:-1]):
                if word.endswith("ironaccel") and not words[i + 1].startswith("-"):
                    assert words[i + 1] in verbs, f"job {name}: `ironaccel {words[i + 1]}` is no command"
