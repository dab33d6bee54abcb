"""Shared by the fuzzers in this folder.

`fuzz_trace(text)` records the case a test is about to run in
$FASTLOAD_FUZZ_TRACE/<pid> (scripts/sanitize.sh sets it): a sanitizer stops the process
at once, before pytest can say which case failed, and the script then prints this line
with the report. Without FASTLOAD_FUZZ_TRACE it does nothing.
"""

import os

import pytest


@pytest.fixture
def fuzz_trace(request):
    directory = os.environ.get("FASTLOAD_FUZZ_TRACE")
    if not directory:
        return lambda text: None
    path = os.path.join(directory, str(os.getpid()))

    def note(text: str) -> None:
        with open(path, "w") as f:
            f.write(f"{request.node.nodeid}: {text}\n")

    return note
