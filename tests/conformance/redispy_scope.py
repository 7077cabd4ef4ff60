"""A pytest plugin for tests/conformance/run: which of redis-py's own tests count.

Issue 25 measures weft-kv with redis-py's tests outside ACL, modules, cluster,
replication and scripting. This plugin deselects those (by the markers redis-py puts on
them, and by test name where it puts none), so the rest is what is measured, against
weft-kv and against redis-server alike. When WEFT_CONFORMANCE_DESELECTED names a file,
each deselected test is written there as "nodeid<TAB>area", for the report.

Loaded with `-p redispy_scope` (tests/conformance on PYTHONPATH); nothing here is
redis-py's code.
"""

import os
import re

# redis-py's own markers for tests that need something other than one standalone server.
MARKERS = {
    "onlycluster": "cluster",
    "redismod": "modules",
    "replica": "replication",
    "ssl": "TLS",
}

# Test function names (without parameters) outside the measure, where no marker says so.
NAMES = [
    (re.compile(r"^test_acl_|^test_auth$|^test_client_kill_filter_by_user$"), "ACL"),
    (re.compile(r"^test_module|_for_modules$|_for_search_module$|^test_info_with_modules$"), "modules"),
    (re.compile(r"^test_cluster_|^test_readonly|^test_readwrite$|_on_cluster|_with_cluster_client$"), "cluster"),
    (re.compile(r"^test_(replicaof|sync|psync|failover)$"), "replication"),
    (re.compile(r"^test_(script|eval|fcall|function)"), "scripting"),
]


def area(item):
    """The out-of-scope area of a collected test, or None when it is measured."""
    for marker, name in MARKERS.items():
        if item.get_closest_marker(marker) is not None:
            return name
    base = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    for pattern, name in NAMES:
        if pattern.search(base):
            return name
    return None


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        a = area(item)
        (keep if a is None else drop).append((item, a))
    if not drop:
        return
    path = os.environ.get("WEFT_CONFORMANCE_DESELECTED")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            for item, a in drop:
                f.write(f"{item.nodeid}\t{a}\n")
    config.hook.pytest_deselected(items=[i for i, _ in drop])
    items[:] = [i for i, _ in keep]
