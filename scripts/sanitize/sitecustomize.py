"""Makes `fastload._C` the sanitizer build while every Python module of fastload comes
from the source tree. scripts/sanitize.sh puts this folder on PYTHONPATH and names the
instrumented module in FASTLOAD_SANITIZED_C; Python imports `sitecustomize` at start-up,
so the pytest process and every subprocess it starts (spawned DataLoader workers,
`python -c` helpers) load the same instrumented module, never fastload/_C*.so.

A finder at the front of sys.meta_path answers for exactly one name; fastload/_ext.py
and the package are untouched.
"""

import importlib.machinery
import importlib.util
import os
import sys

_MODULE = "fastload._C"
_PATH = os.environ.get("FASTLOAD_SANITIZED_C")


class _SanitizedExtensionFinder:
    """Finds fastload._C at FASTLOAD_SANITIZED_C; leaves every other import alone."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != _MODULE:
            return None
        loader = importlib.machinery.ExtensionFileLoader(name, _PATH)
        return importlib.util.spec_from_file_location(name, _PATH, loader=loader)


if _PATH:
    if not os.path.isfile(_PATH):
        sys.exit(f"FASTLOAD_SANITIZED_C={_PATH} is not a file: build it with `make sanitize`")
    sys.meta_path.insert(0, _SanitizedExtensionFinder)
