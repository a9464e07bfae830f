# gpuspark — set-up, tests, demo. `make demo` and `make test` are all a fresh machine needs.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpuspark-installed
TORCH_CPU := torch==2.13.0
PYTEST_ARGS ?= --durations=25

.PHONY: setup test test-all demo lint java monitoring-tools image-tools image clean

setup: $(STAMP) image-tools

# Java >= 17 is needed by Spark 4. Installed with apt when missing and we are root.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	    echo "gpuspark: Java >= 17 not found (got '$${v:-none}'); installing openjdk-17-jre-headless"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	  else \
	    echo "gpuspark: Spark 4 needs Java >= 17 (found '$${v:-none}'): install openjdk-17-jre-headless or set JAVA_HOME" >&2; exit 1; \
	  fi; \
	fi

# Prometheus, promtool, amtool and node_exporter (Debian packages) for the monitoring tests and
# `gpuspark monitor up`. Installed with apt when missing and we are root; else a note (the tests
# that need them skip, saying what to install).
MON_PKGS := prometheus prometheus-alertmanager prometheus-node-exporter
monitoring-tools:
	@if command -v promtool >/dev/null && command -v amtool >/dev/null \
	    && command -v prometheus-node-exporter >/dev/null; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	  echo "gpuspark: installing $(MON_PKGS) (monitoring tests, gpuspark monitor up)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(MON_PKGS) >/dev/null; \
	  for s in prometheus prometheus-alertmanager prometheus-node-exporter; do \
	    (service $$s stop || systemctl stop $$s) >/dev/null 2>&1 || true; done; \
	else \
	  echo "gpuspark: note: install $(MON_PKGS) for the monitoring tests and 'gpuspark monitor up'" >&2; \
	fi

# podman, buildah and debootstrap for `make image` (the container image, docs/image.md).
# Installed with apt when missing and we are root; else a note.
IMAGE_PKGS := podman buildah debootstrap
image-tools:
	@if command -v podman >/dev/null && command -v buildah >/dev/null \
	    && command -v debootstrap >/dev/null; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	  echo "gpuspark: installing $(IMAGE_PKGS) (make image)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(IMAGE_PKGS) >/dev/null; \
	else \
	  echo "gpuspark: note: install $(IMAGE_PKGS) for 'make image'" >&2; \
	fi

$(STAMP): pyproject.toml constraints.txt | java monitoring-tools
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  echo "gpuspark: NVIDIA driver found: installing the CUDA build of torch"; \
	  $(BIN)/python -m pip install -q "torch>=2.4"; \
	else \
	  $(BIN)/python -m pip install -q $(TORCH_CPU); \
	fi
	@$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	@touch $(STAMP)

test: setup
	@$(BIN)/python -m pytest $(PYTEST_ARGS)

test-all: setup
	@$(BIN)/python -m pytest -m "" $(PYTEST_ARGS)

demo: setup
	@$(BIN)/gpuspark demo

# The container image (Containerfile): CPU variant on a Debian base made here by debootstrap;
# `make image BASE_IMAGE=nvcr.io/nvidia/pytorch:<tag> IMAGE=localhost/gpuspark:gpu` for GPU nodes.
IMAGE ?= localhost/gpuspark:cpu
BASE_IMAGE ?= localhost/gpuspark-base:bookworm
image: setup
	@IMAGE=$(IMAGE) BASE_IMAGE=$(BASE_IMAGE) TORCH=$(TORCH_CPU) PYTHON=$(BIN)/python deploy/image/build.sh

lint: setup
	@$(BIN)/ruff check src tests benchmarks
	@$(BIN)/ruff format --check src tests benchmarks
	@$(BIN)/mypy
	@$(BIN)/lint-imports --no-cache

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache .mypy_cache
