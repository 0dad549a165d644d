"""The suite's lanes: ``make test`` (what CI runs; its goal: 15 minutes on 2 cores) leaves out the long lane and names
it at the end of its output; ``make test-long`` runs it. Nothing is left out silently. And ``make test``'s two workers
keep each group (a module with a module-scoped fixture, the Ray modules) on one worker, so that no fixture is built
twice."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import MARKED_LONG, TESTS, long_lane

ROOT = TESTS.parent
# The lane as it stands: a test enters it by a decision written here, not by its mark alone.
LONG_LANE = [
    "tests/test_int8_ranking.py::test_from_pretrained_torch_int8_unpadded_compiled_inductor",
    "tests/test_int8_ranking.py::test_from_pretrained_torch_int8_unpadded_compiled_inductor_with_the_cascade",
    "tests/test_joint_learning.py::test_joint_minilm_learns_which_candidate_matches_the_question",
    "tests/test_run_pretrain.py::test_default_run_lowers_mlm_loss_and_learns_the_sentence_task",
]


def pytest_run(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    """A nested pytest with ``args`` only: not the options of the run around it (``PYTEST_ADDOPTS``; seen: ``-v`` and
    ``--store-durations`` given to ``.ci/run`` changed what these runs print, and a tmp folder's run refused the
    option its own conftest does not define)."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args]
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def test_the_long_lane_is_what_pytest_selects_with_its_mark(request):
    """The lane by the source (``long_lane``, what the summary names), by decision (``LONG_LANE``) and by pytest's
    own collection: the items of the running session with the mark where it collected every test file (``make
    test``: no extra process), else a ``--collect-only -m long`` run of the files that could mark one."""
    assert long_lane() == LONG_LANE
    config = request.config
    collected = {Path(config.invocation_params.dir, arg.split("::")[0]).resolve() for arg in config.args}
    if collected == {TESTS.resolve()}:
        assert config.stash[MARKED_LONG] == LONG_LANE
        return
    # Every file that could mark a test long (by decorator, or a module's or class's ``pytestmark``); collecting all
    # of them costs the suite's import time.
    files = [
        f"tests/{path.name}"
        for path in sorted(TESTS.glob("test_*.py"))
        if re.search(r"mark\.long|pytestmark", path.read_text())
    ]
    result = pytest_run("--collect-only", "-q", "-m", "long", *files)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    selected = [line for line in result.stdout.splitlines() if "::" in line]
    assert sorted(selected) == LONG_LANE  # conftest.py puts the longest first


class Reporter:
    """What ``pytest_terminal_summary`` writes to: the section titles and lines, in order."""

    def __init__(self):
        self.lines = []

    def section(self, title, **kwargs):
        self.lines.append(f"== {title}")

    def write_line(self, line, **kwargs):
        self.lines.append(line)


class Config:
    def __init__(self, markexpr):
        self.markexpr = markexpr

    def getoption(self, name):
        assert name == "markexpr"
        return self.markexpr


@pytest.mark.parametrize("markexpr", ["not long", "not long and not gpu", "", "long", "not slow"])
def test_make_test_names_the_long_lane_it_leaves_out(markexpr):
    import conftest

    reporter = Reporter()
    conftest.pytest_terminal_summary(reporter, Config(markexpr))
    if "not long" in markexpr:  # `make test`: the lane is named, with the command that runs it
        assert reporter.lines[0] == "== long lane: left out of this run"
        assert reporter.lines[1:-1] == LONG_LANE
        assert "make test-long" in reporter.lines[-1]
    else:  # `pytest -m long`, plain `pytest`, other lanes: nothing was left out by this lane, nothing to name
        assert reporter.lines == []


def test_the_makefile_runs_the_lane_apart():
    makefile = (ROOT / "Makefile").read_text()
    test = makefile[makefile.index("\ntest:") : makefile.index("\ntest-long:")]
    long = makefile[makefile.index("\ntest-long:") :].split("\n\n")[0]
    assert '-m "not long"' in test and "-n 2" in test
    assert "-m long" in long and "not long" not in long


@pytest.mark.slow
def test_a_group_runs_whole_on_one_worker(tmp_path):
    """What ``conftest.py`` relies on: tests given one ``xdist_group`` mark by ``pytest_collection_modifyitems`` run on
    one worker under ``-n 2 --dist loadgroup`` (pytest 9.2 with xdist 3.8 spreads them: pytest-xdist#1386)."""
    import conftest

    # Ours runs before xdist's own hook, which turns the marks into groups (a plain hook would run after it).
    assert conftest.pytest_collection_modifyitems.pytest_impl["tryfirst"] is True
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    for item in items:\n"
        "        if item.path.name == 'test_grouped.py':\n"
        "            item.add_marker(pytest.mark.xdist_group('grouped'))\n"
    )
    body = "import time\n\n\n" + "".join(f"def test_{i}():\n    time.sleep(0.2)\n\n\n" for i in range(6))
    (tmp_path / "test_grouped.py").write_text(body)
    (tmp_path / "test_other.py").write_text(body)
    result = pytest_run("-n", "2", "--dist", "loadgroup", "-v", "--rootdir", str(tmp_path), str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    workers = set(re.findall(r"\[(gw\d)\].*PASSED test_grouped\.py", result.stdout))
    assert len(re.findall(r"PASSED test_grouped\.py", result.stdout)) == 6
    assert len(workers) == 1, result.stdout[-3000:]


def test_units_are_handed_out_longest_first_by_the_measured_seconds():
    """``conftest.py`` sorts the units (a group with all its tests, or a test alone) by their seconds in
    ``tests/durations.json``, longest first, a test it does not list counting ``UNKNOWN_SECONDS``; a group's tests stay
    together and in their order. Stated by hand: a 6 s group of two 3 s tests, a 5 s test, two unlisted tests."""
    from types import SimpleNamespace

    import conftest

    nodes = ["a.py::x", "b.py::y", "c.py::new", "b.py::z", "d.py::w", "e.py::other_new"]
    units = {"b.py::y": "b.py", "b.py::z": "b.py"}
    seconds = {"a.py::x": 5.0, "b.py::y": 3.0, "b.py::z": 3.0, "d.py::w": 0.7}
    items = [SimpleNamespace(nodeid=node) for node in nodes]
    key = conftest.longest_units_first(items, {node: units.get(node) for node in nodes}, seconds)
    order = [item.nodeid for item in sorted(items, key=key)]
    assert conftest.UNKNOWN_SECONDS < 0.7
    assert order == ["b.py::y", "b.py::z", "a.py::x", "d.py::w", "c.py::new", "e.py::other_new"]
    # The committed table: positive seconds of at least 1 s per node id (no xdist ``@group`` suffix), where it was
    # measured, and most of it still names tests that exist.
    table = conftest.measured_seconds()
    assert len(table) > 100 and all(value >= conftest.STORED_MIN_SECONDS for value in table.values())
    assert not [node for node in table if "@" in node or not node.startswith("tests/test_")]
    files = {node.split("::")[0] for node in table}
    assert all((ROOT / name).is_file() for name in files)


def test_no_test_module_registers_a_torch_library_operator():
    """Operators live in helpers imported under one name: a ``test_*.py`` module that another imports runs twice in a
    pytest process, and an operator defined twice frees its first definition (``varlen_stand_ins.py`` says how that
    failed, 2026-12-01)."""
    registering = re.compile(r"torch\.library\.|@custom_op|\bLibrary\(")
    modules = [path for path in sorted(TESTS.glob("test_*.py")) if path.name != "test_test_lanes.py"]  # not this one
    offenders = [path.name for path in modules if registering.search(path.read_text())]
    assert offenders == []
    assert registering.search((TESTS / "varlen_stand_ins.py").read_text())  # the pattern finds what it looks for


def test_ci_names_its_host_before_the_tests(monkeypatch, capsys):
    """``.ci/run`` prints one line before ``make test``: the CPU model and vector flags as ``/proc/cpuinfo`` lists them
    (read here with a regex, not the probe's parser), the cores, the load, and a fixed pure-Python loop's seconds, a
    rough sign of the host's speed (the same tests took 19 min 30 s and 29 min 52 s on one VM on 2026-12-02, its loop
    1.6-6.9 s)."""
    import runpy

    run = (ROOT / ".ci" / "run").read_text()
    assert run.index("python3 .ci/host_probe.py") < run.index("\nmake test ")
    # and the tests compile into a fresh inductor cache, as on a fresh CI machine, not into one earlier runs filled
    assert run.index('export TORCHINDUCTOR_CACHE_DIR="$(mktemp -d)"') < run.index("\nmake test ")
    probe = runpy.run_path(str(ROOT / ".ci" / "host_probe.py"))
    monkeypatch.setitem(probe["python_loop_seconds"].__globals__, "LOOP", 2_000_000)  # a tenth: the test is quick
    line = probe["main"]()
    assert capsys.readouterr().out == line + "\n"
    match = re.fullmatch(
        r"host: (.+); (.+); (\d+) cores; load ([\d.]+|nan); python loop 2M: (\d+\.\d\d) s \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)",
        line,
    )
    assert match, line
    assert int(match[3]) == os.cpu_count() and float(match[5]) > 0
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        text = cpuinfo.read_text()
        assert match[1] == re.search(r"^model name\s*:\s*(.*)$", text, re.M)[1].strip()
        flags = set(re.search(r"^flags\s*:\s*(.*)$", text, re.M)[1].split())
        listed = [
            flag for flag in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if flag in flags
        ]
        assert match[2] == (" ".join(listed) or "no listed vector flags")
