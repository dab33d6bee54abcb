"""The `>>>` examples in fastload's docstrings run, so they cannot rot."""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil

import pytest

import fastload
from fastload import _ext


def _modules():
    names = ["fastload"]
    for info in pkgutil.walk_packages(fastload.__path__, prefix="fastload."):
        if not info.name.endswith("__main__"):
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name):
    if _ext.has_ops():
        _ext.require_ops()  # the fake kernels register over operators that must exist first
    elif name == "fastload._meta":
        pytest.skip("fastload._C is not built: no operators to give fake kernels to")
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [test for test in finder.find(module, name) if test.examples]
    for test in tests:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} docstring examples in {name} failed (see above)"


def test_every_test_file_is_listed_in_the_tests_readme():
    """tests/README.md is the map of the tests: each .py file under tests/ is named there."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    files = [os.path.relpath(os.path.join(folder, name), here)
             for folder, dirs, names in os.walk(here) if "__pycache__" not in folder
             for name in names if name.endswith(".py")]
    missing = sorted(f for f in files if os.path.basename(f) not in readme)
    assert not missing, f"tests/README.md does not name {missing}: add each to its layer's row"
