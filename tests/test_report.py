"""``ironaccel report``: the static results site. The model's verdicts are STATUS.md's; the site builds from
the committed results in under 30 s; and in a real browser (Debian's Chromium driven by Selenium) a person
can go from the matrix to a test and to the diff of two real runs of cuda/fake (the second with two passing
tests marked xfail in a copy of the tree, so exactly those two become new failures), and search.

Selenium with Debian's chromium-driver rather than Playwright, because it is the lighter for CI (measured
here: selenium and its dependencies about 42 MB plus chromium-driver's 24 MB, against Playwright's 165 MB,
which bundles Node), and Debian builds chromium-driver from Chromium's own source package, so the driver
always matches the browser. Chromium's console log (goog:loggingPrefs) gives the console errors to check."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from ironaccel.cts import judge, spec, status, targets
from ironaccel.cts.report import model

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("IRONACCEL_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("IRONACCEL_CHROMEDRIVER", "/usr/bin/chromedriver")
#: the tests the second run's expectations mark xfail: they pass, so they end xpass, a failure
CHANGED = ("test_event.py::test_query_never_blocks", "test_event.py::test_timing_errors")


def report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ironaccel", "report", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_flake_rate():
    assert model.flake_rate(["pass", "pass", "not-run"]) == 0
    assert model.flake_rate(["pass", "flaky"]) == 0.5
    assert model.flake_rate(["pass", "fail", "pass", "pass"]) == 0.25
    assert model.flake_rate(["flaky", "flaky"]) == 1
    assert model.flake_rate(["not-run"]) is None


def test_builds_from_the_committed_results_in_under_30_s_with_status_md_levels(tmp_path):
    began = time.monotonic()
    done = report("--out", str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 30
    site = json.loads((tmp_path / "site" / "site.json").read_text())
    docs = status.load_results(ROOT / "results")
    assert {t["name"] for t in site["targets"]} == {d["target"]["name"] for d in docs}
    for t in site["targets"]:
        doc = next(d for d in docs if d["target"]["name"] == t["name"])
        assert t["summary"] == doc["summary"]
        assert (tmp_path / "site" / "targets" / f"{t['slug']}.html").is_file()
    # the Certification table of STATUS.md made from the same files says the same levels, word for word
    text = status.render(docs, spec.load_clauses(), status.registry_infos(),
                         spec.current(list(targets.reported(d["target"]["name"] for d in docs))),
                         targets.reported(d["target"]["name"] for d in docs), judge.definitions())
    for b in site["backends"]:
        assert f"| **{b['name']}** | {b['level']} | {b['why']} |" in text
    for page in ("index.html", "runs.html", "bench.html", "clients.html", "search.html", "search-index.js"):
        assert (tmp_path / "site" / page).is_file()
    assert len(list((tmp_path / "site" / "tests").glob("*.html"))) == len(site["tests"])


def test_an_unreadable_results_folder_is_one_line_and_nothing_is_written(tmp_path):
    done = report("--out", str(tmp_path / "site"), "--runs", str(tmp_path / "absent"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"ironaccel report: {tmp_path / 'absent'}: no such results folder"
    assert not (tmp_path / "site").exists()


# -- in a real browser ------------------------------------------------------------------------------------

def certify_event_tests(tree: Path, results: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "ironaccel", "certify", "--target", "cuda/fake", "--only", "EVENT-*",
                           "--results", str(results)], cwd=tree, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return json.loads((results / "cuda-fake.json").read_text())


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two real runs of cuda/fake's EVENT tests: as the tree is, and from a copy of the tree whose cuda/fake
    expectations mark CHANGED xfail."""
    base = tmp_path_factory.mktemp("runs")
    before = certify_event_tests(ROOT, base / "before")
    tree = base / "tree"
    for part in ("ironaccel", "conformance", "fakes"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree)
    (tree / "conformance" / "expectations" / "cuda-fake.txt").write_text(
        "".join(f"{tid}  xfail  on purpose: the site's diff test\n" for tid in CHANGED))
    after = certify_event_tests(tree, base / "after")
    assert {t["id"]: t["outcome"] for t in after["tests"] if t["id"] in CHANGED} == dict.fromkeys(CHANGED, "xpass")
    return base / "before", base / "after", before, after


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through its chromedriver (Selenium), headless, keeping the browser's console log."""
    from selenium import webdriver
    if not (Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file()):
        pytest.skip(f"no Chromium at {CHROMIUM} or chromedriver at {CHROMEDRIVER} "
                    "(apt-get install chromium chromium-driver; ci/provision installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--window-size=1200,800", "--disable-gpu"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


def problems(driver) -> list[str]:
    """What a person would see as an error in the console since the last call: script errors, uncaught
    exceptions and files that do not load (Chromium logs each as SEVERE)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def shoot(driver, name: str, tmp_path: Path) -> None:
    """A screenshot of what is shown; also into $IRONACCEL_SITE_SHOTS (docs/site's were made so)."""
    for folder in filter(None, (tmp_path, os.environ.get("IRONACCEL_SITE_SHOTS"))):
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def texts(driver, css: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def link(driver, scope: str, text: str):
    """The link whose whole text is ``text`` inside the element ``scope`` (CSS)."""
    return driver.find_element(By.CSS_SELECTOR, scope).find_element(By.LINK_TEXT, text)


def follow(driver, element) -> None:
    """Click a link and wait until the page it opens has loaded whole: a click can return while a large page (a
    client suite's 2,000 rows) is still being parsed, and what is counted then is a part of it."""
    page = driver.find_element(By.TAG_NAME, "html")
    element.click()
    wait = WebDriverWait(driver, 60)
    wait.until(expected_conditions.staleness_of(page))
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")


def test_matrix_to_test_to_diff_and_search_in_chromium(two_runs, browser, tmp_path):
    before_dir, after_dir, before, after = two_runs
    out = tmp_path / "site"
    done = report("--out", str(out), "--runs", str(before_dir), str(after_dir))
    assert done.returncode == 0, done.stderr
    committed = {d["target"]["name"]: d for d in status.load_results(ROOT / "results")}

    seen = []
    browser.get((out / "index.html").as_uri())
    shoot(browser, "matrix", tmp_path)
    clause = next(t for t in before["tests"] if t["id"] == CHANGED[1])["clauses"][0]
    follow(browser, link(browser, "#matrix-simulated", clause))
    follow(browser, link(browser, "main", CHANGED[1]))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Test {CHANGED[1]}"
    shoot(browser, "test", tmp_path)
    # the outcome shown per target is its results file's: cuda/fake's from the first run (the second ran with
    # other expectations, so it is stale, as STATUS.md would judge it), the others' the committed files'
    shown = {row.get_attribute("data-target"): row.find_element(By.CSS_SELECTOR, "td.outcome").text
             for row in browser.find_elements(By.CSS_SELECTOR, "#outcomes tr[data-target]")}
    expected = {name: next((t["outcome"] for t in d["tests"] if t["id"] == CHANGED[1]), "not in its run")
                for name, d in committed.items()}
    expected["cuda/fake"] = "pass"
    assert shown == expected
    history = next(r for r in texts(browser, "#history tr") if r.startswith("cuda/fake")).split()
    assert history[-2:] == ["pass", "xpass"]  # the two runs, in time order
    seen += problems(browser)

    follow(browser, link(browser, "nav", "Runs & diffs"))
    diff = f"#diffs tr[data-old='{before_dir}'][data-new='{after_dir}'] a"
    follow(browser, browser.find_element(By.CSS_SELECTOR, diff))
    shoot(browser, "diff", tmp_path)
    section = "section.diff-target[data-target='cuda/fake']"
    assert sorted(texts(browser, f"{section} ul.new_failures li")) == sorted(CHANGED)
    browser.implicitly_wait(0)  # absent elements: do not wait for them
    for kind in ("fixes", "newly_flaky", "newly_not_run"):
        assert texts(browser, f"{section} ul.{kind} li") == []
    browser.implicitly_wait(5)
    assert len(texts(browser, "section.diff-target")) == 1  # cuda/fake is the only target both runs ran
    seen += problems(browser)

    box = browser.find_element(By.CSS_SELECTOR, "header input[name=q]")
    box.send_keys("query_never_blocks" + Keys.ENTER)
    browser.find_element(By.CSS_SELECTOR, "#results li")
    assert browser.find_element(By.ID, "count").text == "1 found"
    follow(browser, browser.find_element(By.CSS_SELECTOR, "#results a"))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Test {CHANGED[0]}"
    seen += problems(browser)

    target = next(t for t in json.loads((out / "site.json").read_text())["targets"] if t["name"] == "cuda/nvidia")
    browser.get((out / "targets" / f"{target['slug']}.html").as_uri())
    counts = dict(re.fullmatch(r"(\d+) (\S+)", c).group(2, 1) for c in texts(browser, "#summary .count"))
    assert counts == {o: str(n) for o, n in committed["cuda/nvidia"]["summary"].items() if n}
    # a client suite's drill-down: every test of every target, the filter finds a failing one
    fake = json.loads((ROOT / "clients" / "results" / "numba-cuda--cuda-fake.json").read_text())
    ids = set(fake["tests"]) | {tid for p in (ROOT / "clients" / "results").glob("numba-cuda--*.json")
                                for tid in json.loads(p.read_text())["tests"]}
    browser.get((out / "clients.html").as_uri())
    follow(browser, link(browser, "#comparisons", "numba-cuda"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#client-tests tr[id]")) == len(ids)
    failing = next(tid for tid, t in sorted(fake["tests"].items()) if t["outcome"] == "fail")
    browser.find_element(By.ID, "filter").send_keys(failing)
    visible = browser.execute_script(
        "return [...document.querySelectorAll('#client-tests tr[id]')].filter(r => !r.hidden).map(r => r.cells[0].textContent)")
    assert visible == sorted(tid for tid in ids if failing.lower() in tid.lower())
    seen += problems(browser)

    for extra in ("bench.html", "clients.html", "runs.html"):
        browser.get((out / extra).as_uri())
        seen += problems(browser)
    assert seen == []
