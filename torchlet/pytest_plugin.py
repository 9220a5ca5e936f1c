"""The spec suite's command-line options, loaded by pytest from this package's entry point.

They live here rather than in the repository's conftest.py because pytest reads an installed
plugin before it parses the command line: `pytest --impl-root DIR -k v00` then takes DIR as the
option's value. Known only to conftest.py, the option is unknown at that first parse, DIR looks
like a test path outside the repository, and pytest never loads the conftest that defines it.
"""
from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption("--impl-root", default=None,
                     help="run the specs against this tree of versions instead of implementations/")
