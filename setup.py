"""Builds fastload._C, the native core, with torch.utils.cpp_extension.

Configuration (environment variables):
  FASTLOAD_JPEG_PREFIX   libjpeg-turbo install prefix (include/ and lib/); otherwise
                         pkg-config's libjpeg, then the compiler's default paths.
  FASTLOAD_CUDA          auto (default): CUDA kernels when nvcc is found and torch has
                         CUDA; 1: require them; 0: CPU only.
  FASTLOAD_PNG_PREFIX    libpng install prefix (include/ and lib/); otherwise pkg-config's
                         libpng, then the compiler's default paths. Without libpng the
                         build goes on and PNG images are decoded by PIL.
  FASTLOAD_NVJPEG_PREFIX nvJPEG prefix; otherwise the CUDA toolkit, then the
                         nvidia-nvjpeg pip package. Without it the GPU decode op raises.
  TORCH_CUDA_ARCH_LIST   GPU architectures (default: those of the GPUs this machine sees,
                         as torch picks them; with none visible, "8.0+PTX": A100 code,
                         and PTX that newer GPUs compile once when first loaded).
  FASTLOAD_DEBUG=1       -O0 -g and asserts.
  FASTLOAD_SANITIZE      e.g. "address,undefined": a CPU-only build instrumented with
                         -fsanitize=<value> (-O1 -g1, frame pointers) into
                         build-sanitize/ (objects in temp/, the module in lib/), so the
                         normal build/ and fastload/_C*.so stay as they are. Run it with
                         `make sanitize` (scripts/sanitize.sh), which loads it.

The build prints its configuration; a missing optional piece degrades the build
(reported by `python -m fastload.info`: libpng, CUDA, nvJPEG), a missing libjpeg-turbo
stops it with the fix.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))
JPEG_HELP = (
    "fastload needs libjpeg-turbo >= 1.5 (headers and library). Install it with "
    "`apt-get install libturbojpeg0-dev libjpeg62-turbo-dev` (Debian/Ubuntu), "
    "`dnf install libjpeg-turbo-devel` (Fedora/RHEL), `brew install jpeg-turbo` (macOS) "
    "or `conda install libjpeg-turbo`, or point FASTLOAD_JPEG_PREFIX at its prefix."
)


def log(message):
    print(f"[fastload build] {message}", flush=True)


def pkg_config(package, *flags):
    if shutil.which("pkg-config") is None:
        return None
    result = subprocess.run(["pkg-config", *flags, package], capture_output=True, text=True)
    return result.stdout.split() if result.returncode == 0 else None


SYSTEM_INCLUDE_DIRS = ["/usr/include", "/usr/local/include", "/opt/homebrew/include"]


def find_header(name, include_dirs):
    """Path of header `name` in include_dirs (and their multiarch subfolders), or None."""
    multiarch = sysconfig.get_config_var("MULTIARCH")
    for directory in include_dirs:
        for folder in (directory, os.path.join(directory, multiarch) if multiarch else None):
            if folder and os.path.exists(os.path.join(folder, name)):
                return os.path.join(folder, name)
    return None


def find_libjpeg():
    """Returns (include_dirs, library_dirs, libraries, version) for libjpeg-turbo."""
    prefix = os.environ.get("FASTLOAD_JPEG_PREFIX")
    if prefix:  # an explicit prefix is the only place looked at
        include_dirs = [os.path.join(prefix, "include")]
        library_dirs = [d for d in (os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")) if os.path.isdir(d)]
        search, origin = include_dirs, f"FASTLOAD_JPEG_PREFIX={prefix}"
    else:
        cflags = pkg_config("libjpeg", "--cflags")
        libs = pkg_config("libjpeg", "--libs")
        if cflags is not None and libs is not None:
            include_dirs = [f[2:] for f in cflags if f.startswith("-I")]
            library_dirs = [f[2:] for f in libs if f.startswith("-L")]
            origin = "pkg-config libjpeg"
        else:
            include_dirs, library_dirs, origin = [], [], "default compiler paths"
        search = include_dirs + SYSTEM_INCLUDE_DIRS
    jconfig, jpeglib = find_header("jconfig.h", search), find_header("jpeglib.h", search)
    if jconfig is None or jpeglib is None:
        sys.exit(f"error: libjpeg-turbo headers (jpeglib.h, jconfig.h) not found ({origin}). {JPEG_HELP}")
    match = re.search(r"#define\s+LIBJPEG_TURBO_VERSION\s+(\S+)", open(jconfig).read())
    if match is None:
        sys.exit(f"error: {jconfig} is plain libjpeg, not libjpeg-turbo (no crop/skip scanline API). {JPEG_HELP}")
    version = match.group(1)
    if tuple(int(part) for part in re.findall(r"\d+", version)[:2]) < (1, 5):
        sys.exit(f"error: libjpeg-turbo {version} is too old (the crop/skip scanline API needs >= 1.5). {JPEG_HELP}")
    log(f"libjpeg-turbo {version} from {origin} ({jconfig})")
    return include_dirs, library_dirs, ["jpeg"], version


PNG_HELP = (
    "Install it with `apt-get install libpng-dev` (Debian/Ubuntu), `dnf install libpng-devel` "
    "(Fedora/RHEL), `brew install libpng` (macOS) or `conda install libpng`, or point "
    "FASTLOAD_PNG_PREFIX at its prefix, and rebuild"
)


def find_libpng():
    """Returns (include_dirs, library_dirs, libraries, version) for libpng >= 1.6, or None
    (PNG images then go through PIL, as `python -m fastload.info` says)."""
    prefix = os.environ.get("FASTLOAD_PNG_PREFIX")
    if prefix:  # an explicit prefix is the only place looked at
        include_dirs = [os.path.join(prefix, "include")]
        library_dirs = [d for d in (os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")) if os.path.isdir(d)]
        search, origin, libraries = include_dirs, f"FASTLOAD_PNG_PREFIX={prefix}", ["png"]
    else:
        cflags = pkg_config("libpng", "--cflags")
        libs = pkg_config("libpng", "--libs")
        if cflags is not None and libs is not None:
            include_dirs = [f[2:] for f in cflags if f.startswith("-I")]
            library_dirs = [f[2:] for f in libs if f.startswith("-L")]
            libraries = [f[2:] for f in libs if f.startswith("-l")] or ["png"]  # -lpng16 -lz
            origin = "pkg-config libpng"
        else:
            include_dirs, library_dirs, libraries, origin = [], [], ["png"], "default compiler paths"
        search = include_dirs + SYSTEM_INCLUDE_DIRS
    header = find_header("png.h", search)
    if header is None:
        log(f"libpng: not found ({origin}); PNG images are decoded by PIL. {PNG_HELP}")
        return None
    match = re.search(r'#define\s+PNG_LIBPNG_VER_STRING\s+"([^"]+)"', open(header).read())
    version = match.group(1) if match else "unknown"
    if match is None or tuple(int(part) for part in re.findall(r"\d+", version)[:2]) < (1, 6):
        log(f"libpng: {version} in {header} is older than 1.6; PNG images are decoded by PIL. {PNG_HELP}")
        return None
    log(f"libpng {version} from {origin} ({header})")
    return include_dirs, library_dirs, libraries, version


def find_nvjpeg(cuda_home, cuda_major):
    """Returns (include_dir, library_dir, library_file) of an nvJPEG built for CUDA
    `cuda_major` (other wheels, e.g. DALI's CUDA 12 one, may sit beside it), or None."""
    prefixes = []
    if os.environ.get("FASTLOAD_NVJPEG_PREFIX"):
        prefixes.append(os.environ["FASTLOAD_NVJPEG_PREFIX"])
    if cuda_home:
        prefixes.append(cuda_home)
    try:  # the nvidia-nvjpeg wheel installs into site-packages/nvidia/cu13
        import nvidia

        for base in nvidia.__path__:
            prefixes += sorted(glob.glob(os.path.join(base, "cu*"))) + [os.path.join(base, "nvjpeg")]
    except ImportError:
        pass
    for prefix in prefixes:
        header = os.path.join(prefix, "include", "nvjpeg.h")
        for libdir in (os.path.join(prefix, "lib64"), os.path.join(prefix, "lib")):
            libs = sorted(glob.glob(os.path.join(libdir, f"libnvjpeg.so.{cuda_major}*")))
            if os.path.exists(header) and libs:
                return os.path.dirname(header), libdir, os.path.basename(libs[0])
    return None


def want_cuda(torch, cuda_home):
    mode = os.environ.get("FASTLOAD_CUDA", "auto").lower()
    if mode not in ("auto", "0", "1"):
        sys.exit(f"error: FASTLOAD_CUDA must be auto, 0 or 1, got {mode!r}")
    has_nvcc = cuda_home is not None and os.path.exists(os.path.join(cuda_home, "bin", "nvcc"))
    has_torch_cuda = torch.version.cuda is not None
    if mode == "0":
        log("CUDA kernels: off (FASTLOAD_CUDA=0)")
        return False
    if has_nvcc and has_torch_cuda:
        log(f"CUDA kernels: on (nvcc in {cuda_home}, torch CUDA {torch.version.cuda})")
        return True
    reason = "nvcc not found (set CUDA_HOME)" if not has_nvcc else "this torch build has no CUDA"
    if mode == "1":
        sys.exit(f"error: FASTLOAD_CUDA=1 but {reason}")
    log(f"CUDA kernels: off ({reason})")
    return False


def default_cuda_home():
    """torch guesses CUDA_HOME from `which nvcc`, wrong when nvcc is a wrapper script."""
    if not os.environ.get("CUDA_HOME") and not os.environ.get("CUDA_PATH"):
        if os.path.exists("/usr/local/cuda/bin/nvcc"):
            os.environ["CUDA_HOME"] = "/usr/local/cuda"


def extensions():
    default_cuda_home()
    import torch
    from torch.utils import cpp_extension

    debug = os.environ.get("FASTLOAD_DEBUG") == "1"
    sanitize = sanitizers()
    include_dirs, library_dirs, libraries, jpeg_version = find_libjpeg()
    png = find_libpng()
    cuda_home = cpp_extension.CUDA_HOME
    if sanitize and os.environ.get("FASTLOAD_CUDA", "auto") == "1":
        sys.exit("error: FASTLOAD_SANITIZE builds are CPU only; unset FASTLOAD_CUDA or set it to 0")
    if sanitize:
        log(f"sanitizers: {sanitize} (into {SANITIZE_BUILD})")
        os.environ["FASTLOAD_CUDA"] = "0"  # nvcc objects are not instrumented
    with_cuda = want_cuda(torch, cuda_home)

    sources = sorted(glob.glob(os.path.join("csrc", "**", "*.cpp"), recursive=True))
    # -g1: line tables for backtraces, without the full debug info that Python's own -g
    # asks for (a third of the compile time, mostly of torch's headers).
    cxx_flags = ["-O0", "-g"] if debug else ["-O3", "-DNDEBUG", "-g1"]
    if sanitize:
        # -O1 keeps the run bearable and the stacks readable. Python's own flags bring
        # -fwrapv, which makes signed overflow defined and so invisible to UBSan. The
        # libstdc++ macros make std::vector tell ASan its size (a read past size() but
        # within capacity, e.g. of a reused decode buffer, is reported) and bound-check [].
        cxx_flags = ["-O1", "-g1", "-fno-omit-frame-pointer", "-fno-wrapv", f"-fsanitize={sanitize}",
                     "-D_GLIBCXX_SANITIZE_VECTOR", "-D_GLIBCXX_ASSERTIONS"]
    # torch's headers choose the C++ standard (C++20 for torch >= 2.10).
    cxx_flags += ["-fvisibility=hidden", "-Wall", "-Wno-unused-function"]
    define_macros = [("FASTLOAD_JPEG_VERSION", f'"{jpeg_version}"')]
    if png is not None:
        png_include, png_libdirs, png_libraries, png_version = png
        include_dirs += [d for d in png_include if d not in include_dirs]
        library_dirs += [d for d in png_libdirs if d not in library_dirs]
        libraries += [name for name in png_libraries if name not in libraries]
        define_macros.append(("FASTLOAD_PNG_VERSION", f'"{png_version}"'))
    extra_link_args = [f"-fsanitize={sanitize}"] if sanitize else []
    nvcc_flags = ["-O3", "--expt-relaxed-constexpr"]

    if with_cuda:
        sources += sorted(glob.glob(os.path.join("csrc", "**", "*.cu"), recursive=True))
        define_macros.append(("FASTLOAD_WITH_CUDA", "1"))
        if "TORCH_CUDA_ARCH_LIST" in os.environ:
            log(f"TORCH_CUDA_ARCH_LIST={os.environ['TORCH_CUDA_ARCH_LIST']}")
        elif torch.cuda.is_available():  # torch compiles for exactly the GPUs it sees
            log("TORCH_CUDA_ARCH_LIST: the visible GPUs' (" + ", ".join(
                sorted({"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})) + ")")
        else:
            # Without a GPU torch would compile for every architecture of its own build.
            # One architecture and its PTX keep the (check-only) compile short: each
            # architecture costs a full nvcc pass of every .cu file.
            os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0+PTX"
            log("TORCH_CUDA_ARCH_LIST=8.0+PTX (no GPU visible)")
        nvjpeg = find_nvjpeg(cuda_home, torch.version.cuda.split(".")[0])
        if nvjpeg:
            nvjpeg_include, nvjpeg_libdir, nvjpeg_lib = nvjpeg
            include_dirs.append(nvjpeg_include)
            define_macros.append(("FASTLOAD_WITH_NVJPEG", "1"))
            extra_link_args += [f"-L{nvjpeg_libdir}", f"-l:{nvjpeg_lib}", f"-Wl,-rpath,{nvjpeg_libdir}"]
            log(f"nvJPEG: {nvjpeg_libdir}/{nvjpeg_lib}")
        else:
            log("nvJPEG: not found (pip install nvidia-nvjpeg, or FASTLOAD_NVJPEG_PREFIX); GPU decode disabled")

    flags_text = " ".join(cxx_flags + (nvcc_flags if with_cuda else []))
    define_macros.append(("FASTLOAD_BUILD_FLAGS", f'"{flags_text}"'))
    log(f"sources: {len(sources)}, flags: {flags_text}")

    extension_class = cpp_extension.CUDAExtension if with_cuda else cpp_extension.CppExtension
    return [
        extension_class(
            name="fastload._C",
            sources=sources,
            include_dirs=[os.path.join(ROOT, "csrc")] + include_dirs,
            library_dirs=library_dirs,
            libraries=libraries,
            define_macros=define_macros,
            extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
            # The libjpeg found at build time is the one loaded at run time.
            extra_link_args=extra_link_args + [f"-Wl,-rpath,{d}" for d in library_dirs],
        )
    ]


def sanitizers():
    """The FASTLOAD_SANITIZE value ("address,undefined"), or "" for a normal build."""
    value = os.environ.get("FASTLOAD_SANITIZE", "").strip()
    if value and not re.fullmatch(r"[a-z-]+(,[a-z-]+)*", value):
        sys.exit(f"error: FASTLOAD_SANITIZE must be a -fsanitize= list such as address,undefined; got {value!r}")
    return value


SANITIZE_BUILD = os.path.join(ROOT, "build-sanitize")


def build_ext_class():
    from torch.utils.cpp_extension import BuildExtension

    class IncrementalBuildExtension(BuildExtension):
        """Keeps objects in build/ (pip's editable build would use a new temp dir each
        time), so ninja recompiles only the sources that changed; and starts the longest
        compiles first."""

        def build_extension(self, ext):
            # setuptools sorts the sources by name, and ninja starts them in that order, so
            # the two longest compiles (nvcc's, and the bindings, which parse pybind11 on top
            # of torch's headers) would start late and run alone at the end on a machine with
            # few cores. BuildExtension has made compiler.compile its ninja writer by now.
            compile_objects = self.compiler.compile

            def longest_first(sources, *args, **kwargs):
                return compile_objects(sorted(sources, key=_compile_order), *args, **kwargs)

            self.compiler.compile = longest_first
            try:
                super().build_extension(ext)
            finally:
                self.compiler.compile = compile_objects

        def finalize_options(self):
            super().finalize_options()
            self.build_temp = os.path.join(ROOT, "build", "temp")
            if sanitizers():  # never over the normal objects or fastload/_C*.so
                self.build_temp = os.path.join(SANITIZE_BUILD, "temp")
                self.build_lib = os.path.join(SANITIZE_BUILD, "lib")
                self.inplace = False

    return IncrementalBuildExtension.with_options(use_ninja=shutil.which("ninja") is not None or _has_ninja_module())


def _compile_order(path):
    return (not path.endswith(".cu"), os.path.basename(path) != "fastload.cpp", path)


def _has_ninja_module():
    try:
        import ninja  # noqa: F401

        return True
    except ImportError:
        return False


setup(ext_modules=extensions(), cmdclass={"build_ext": build_ext_class()})
