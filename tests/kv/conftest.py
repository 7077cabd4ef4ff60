"""Fixtures of the weft-kv client suite: the server under test is a parameter.

`kv` is one server for a whole test module (started once, FLUSHALL before each test
that asks for `r`); `kv_factory` starts extra servers with other options (a password,
another fsync policy) and tears each down at the end of its test. Which program runs
is `KV_TARGET` (see kvserver.py): weft-kv or Debian's redis-server.
"""

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from kvserver import Server, target  # noqa: E402


def pytest_report_header(config):
    t = target()
    extra = f" WEFT_BIN={os.environ.get('WEFT_BIN')}" if t == "weft" else ""
    return f"kv target: {t}{extra}"


@pytest.fixture(scope="module")
def kv():
    s = Server(name="mod")
    try:
        s.start()
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def kv_factory():
    servers = []

    def make(**kw):
        s = Server(**kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.cleanup()


@pytest.fixture
def r(kv):
    """A RESP3 redis-py client on a flushed `kv`."""
    c = kv.client()
    c.flushall()
    yield c
    c.close()


def need_tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (apt-get install redis-tools)")
    return path
