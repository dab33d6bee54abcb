"""The build's configuration: a missing libjpeg-turbo stops it with the package to install,
a missing libpng does not (PNG then goes through PIL); `python -m fastload.info` reports
what was built."""

import os
import subprocess
import sys

from fastload import _ext

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_missing_libjpeg_stops_the_build_naming_the_package(tmp_path):
    env = dict(os.environ, FASTLOAD_JPEG_PREFIX=str(tmp_path))  # an empty prefix
    result = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "libjpeg-turbo headers (jpeglib.h, jconfig.h) not found" in result.stderr
    assert "apt-get install libturbojpeg0-dev" in result.stderr and "FASTLOAD_JPEG_PREFIX" in result.stderr


def test_missing_libpng_leaves_png_to_pil_and_says_how_to_get_it(tmp_path):
    env = dict(os.environ, FASTLOAD_PNG_PREFIX=str(tmp_path))  # an empty prefix
    result = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "libpng: not found (FASTLOAD_PNG_PREFIX=" in result.stdout
    assert "PNG images are decoded by PIL" in result.stdout and "apt-get install libpng-dev" in result.stdout


def test_info_reports_the_build():
    result = subprocess.run([sys.executable, "-m", "fastload.info"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0
    report = {line.split("  ", 1)[0]: line.split("  ", 1)[-1].strip() for line in result.stdout.splitlines()}
    assert report["fastload._C"] == "built" and report["ops: CPU"] == "True"
    assert report["libjpeg-turbo"][0].isdigit() and "-O3" in report["flags"]
    png = _ext.build_info().get("libpng")
    assert report["PNG decoder"] == (f"libpng {png}" if png else "PIL (built without libpng)")
