"""`python -m fastload.info`: versions, what was built, and how.

Example:
    $ python -m fastload.info
"""

from __future__ import annotations

import platform
import sys


def collect() -> dict:
    import torch

    from fastload import __version__, _ext

    info = {
        "fastload": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch CUDA": torch.version.cuda,
        "CUDA device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
    for name in ("torchvision", "PIL", "numpy", "webdataset", "nvidia.dali"):
        try:
            module = __import__(name, fromlist=["__version__"])
            info[name] = getattr(module, "__version__", "installed")
        except Exception:  # noqa: BLE001 - absent or broken optional package
            info[name] = None
    module, error = _ext.load_extension()
    info["fastload._C"] = "built" if module is not None else f"not built ({error})"
    built = _ext.build_info()
    info["ops: CPU"] = module is not None
    info["ops: CUDA"] = built.get("cuda", False)
    info["ops: nvJPEG"] = built.get("nvjpeg", False)
    # PNG in C++ (libpng), or through PIL where the build found no libpng.
    info["PNG decoder"] = f"libpng {built['libpng']}" if built.get("libpng") else "PIL (built without libpng)"
    info["augment CPU path"] = built.get("augment_cpu_path")  # "avx2" or "baseline", picked at run time
    info["libjpeg-turbo"] = built.get("libjpeg_turbo")
    info["compiler"] = built.get("compiler")
    info["flags"] = built.get("flags")
    return info


def main() -> None:
    info = collect()
    width = max(len(key) for key in info)
    for key, value in info.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
