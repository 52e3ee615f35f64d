"""Shared fixtures. Ray tests share one fake two-node cluster (2 nodes x 8 logical GPUs).

Time limits: pytest-timeout's limit (``timeout`` in pyproject.toml, or a test's
``@pytest.mark.timeout``) fails a test that runs past it, by SIGALRM, with its traceback; the
worker goes on with the next test. A test stuck where the signal cannot reach it (a C call that
never returns) is ended ``HARD_LIMIT_GRACE_S`` later by ``faulthandler``, which writes every
thread's stack to a file first; when that ends a pytest-xdist worker, the controller's report of
the crashed test carries the file (before this, a worker ended by pytest-timeout's thread method
left only "node down: Not properly terminated").
"""

from __future__ import annotations

import faulthandler
import hashlib
import json
import os
import tempfile

import pytest

HARD_LIMIT_GRACE_S = 60.0
CRASH_DIR_ENV = "RLINF_TEST_CRASH_DIR"


@pytest.fixture(scope="session")
def ray_cluster():
    """A real multi-raylet Ray cluster on this machine, with node-rank labels; yields a Cluster."""
    import ray
    from ray.cluster_utils import Cluster as RayTestCluster

    from rlinf.scheduler import Cluster

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    fake = RayTestCluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "num_gpus": 8, "labels": {"rlinf.io/node-rank": "0"}},
    )
    fake.add_node(num_cpus=2, num_gpus=8, labels={"rlinf.io/node-rank": "1"})
    # attached by address, without Ray's token authentication: allowed for this loopback test cluster
    cluster = Cluster(num_nodes=2, address=fake.address, allow_unauthenticated=True)
    yield cluster
    ray.shutdown()
    fake.shutdown()


def pytest_addoption(parser):
    """``--quick``: the developers' tier (``bash scripts/test.sh --quick``), without the tests
    marked ``ray`` (they start a Ray cluster) or ``slow`` (end-to-end runs, model builds)."""
    parser.addoption("--quick", action="store_true", default=False,
                     help="skip tests marked ray or slow (the developers' quick tier)")


#: seconds per test file from a recent full run (scripts/test_durations.py); a file not listed
#: counts this much
DURATIONS = os.path.join(os.path.dirname(__file__), "durations.json")
UNLISTED_FILE_S = 5.0


def slowest_files_first(items: list) -> None:
    """Order ``items`` file by file, the longest files first (within a file, as collected).

    pytest-xdist's ``--dist loadfile`` hands whole files to the two workers in collection order
    (scripts/test.sh passes ``--no-loadscope-reorder``, else it would order them by their number
    of tests): longest first lets the short files fill in at the end, so both workers finish
    together instead of one running a long file alone.
    """
    try:
        with open(DURATIONS, encoding="utf-8") as f:
            seconds = json.load(f)
    except (OSError, ValueError):
        return
    rank = {}
    for item in items:
        path = os.path.relpath(str(item.path), os.path.dirname(os.path.dirname(__file__)))
        rank.setdefault(path, -seconds.get(path, UNLISTED_FILE_S))
    items.sort(key=lambda item: rank[os.path.relpath(str(item.path),
                                                     os.path.dirname(os.path.dirname(__file__)))])


def pytest_collection_modifyitems(config, items):
    """The longest files first (:func:`slowest_files_first`); with ``--quick``, deselect what the
    quick tier leaves out (reported as deselected)."""
    slowest_files_first(items)
    if not config.getoption("quick"):
        return
    keep, drop = [], []
    for item in items:
        slow = item.get_closest_marker("ray") or item.get_closest_marker("slow")
        (drop if slow else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config):
    """The controller (or the single process) picks the folder of stack dumps; xdist workers,
    started later from this process, inherit it through the environment."""
    if CRASH_DIR_ENV not in os.environ:
        os.environ[CRASH_DIR_ENV] = tempfile.mkdtemp(prefix="rlinf-test-stacks-")


def crash_file(nodeid: str) -> str:
    """Where the hard limit of the test ``nodeid`` writes its stacks."""
    name = hashlib.sha1(nodeid.encode()).hexdigest()[:16] + ".txt"
    return os.path.join(os.environ[CRASH_DIR_ENV], name)


def soft_limit_s(item) -> float:
    """The pytest-timeout limit of ``item`` in seconds (0: none): marker, then --timeout, then ini."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    option = item.config.getoption("timeout", None)
    if option is not None:
        return float(option)
    return float(item.config.getini("timeout") or 0)


@pytest.fixture(autouse=True)
def hard_time_limit(request):
    """Ends the process with every thread's stack in ``crash_file`` if the test outlives its
    pytest-timeout limit by ``HARD_LIMIT_GRACE_S``; the file is removed when the test ends."""
    limit = soft_limit_s(request.node)
    if limit <= 0:
        yield
        return
    path = crash_file(request.node.nodeid)
    with open(path, "w") as out:
        faulthandler.dump_traceback_later(limit + HARD_LIMIT_GRACE_S, exit=True, file=out)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
    os.remove(path)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """xdist: a crashed worker's report says whether the hard limit ended it, with the stacks."""
    path = crash_file(crashitem)
    stacks = open(path).read() if os.path.exists(path) else ""
    if stacks:
        report.longrepr = (f"{report.longrepr}\nended by the hard time limit (its pytest-timeout limit "
                           f"+ {HARD_LIMIT_GRACE_S:.0f} s); its threads:\n{stacks}")
    else:
        report.longrepr = (f"{report.longrepr}\nnot ended by the time limit: the process died "
                           "(a signal such as SIGKILL from the OOM killer, a segfault, or os._exit)")
