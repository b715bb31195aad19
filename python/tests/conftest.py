"""ZO_EXPECT_INSTALLED=DIR (tests/python_installed.sh): the suite must run against the zoffload installed under DIR
(a venv), package and library both; a run that picked up the checkout's package or build/libzoffload.so stops here."""
import os

import pytest


def pytest_sessionstart(session):
    root = os.environ.get("ZO_EXPECT_INSTALLED")
    if not root:
        return
    import zoffload
    root = os.path.realpath(root)
    for what, path in (("package", zoffload.__file__), ("library", zoffload.__library__)):
        path = os.path.realpath(path)
        if os.path.commonpath([path, root]) != root:
            raise pytest.UsageError("ZO_EXPECT_INSTALLED=%s: the zoffload %s in use is %s" % (root, what, path))
    print("zoffload under test: %s, library %s (%s)" % (zoffload.__file__, zoffload.__library__, zoffload._lib.source))
