"""The examples run: a tiny configuration of the AMP training loop on the CPU."""

import importlib.util
import math
import os

import pytest

pytest.importorskip("torchvision")

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_train_amp_tiny(amp, tmp_path):
    example = load("train_amp")
    data = example.make_tiny_folder(str(tmp_path), classes=2, per_class=8)
    result = example.main(["--tiny", "--data", data, "--device", "cpu", "--amp", amp, "--epochs", "2",
                           "--workers", "1", "--accumulate", "2"])
    assert result["path"].startswith("native")
    assert result["batches"] == 2 and len(result["losses"]) == 4
    assert all(math.isfinite(loss) for loss in result["losses"])
