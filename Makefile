# gpuspark — set-up, tests, demo. `make demo` and `make test` are all a fresh machine needs.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpuspark-installed
TORCH_CPU := torch==2.13.0
PYTEST_ARGS ?= --durations=25

.PHONY: jvm-archive setup test test-all demo lint java monitoring-tools image-tools host-tools image clean

setup: $(STAMP) image-tools host-tools jvm-archive

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

# nft and systemd-analyze check what `gpuspark render standalone` writes (nftables rules,
# systemd units; docs/bare-metal.md). Installed with apt when missing and we are root; else a
# note (those tests skip, saying what to install).
HOST_PKGS := nftables systemd
host-tools:
	@if command -v nft >/dev/null && command -v systemd-analyze >/dev/null; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	  echo "gpuspark: installing $(HOST_PKGS) (render standalone checks)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(HOST_PKGS) >/dev/null; \
	else \
	  echo "gpuspark: note: install $(HOST_PKGS) for the render standalone checks" >&2; \
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
	@$(BIN)/python -m pip install -q -c constraints.txt -e ".[all,dev]"
	@touch $(STAMP)

# The class-data-sharing archive of the driver JVM (gpuspark.cluster.jvm): built once per Java and
# Spark installation (about 30 s) under ~/.gpuspark/jvm; later drivers start in about half the
# time. Nothing to do when it exists; GPUSPARK_JVM_TUNING=0 skips it.
jvm-archive: $(STAMP)
	@$(BIN)/python -c "from gpuspark.cluster.jvm import archive_path, executor_archive_path; \
	import sys; a = [archive_path(), executor_archive_path()]; \
	sys.exit(0 if all(p is None or p.is_file() for p in a) else 1)" \
	|| (echo "gpuspark: building the driver's and the executors' class-data-sharing archives (about 60 s)"; \
	    $(BIN)/python -c "from gpuspark.cluster.jvm import build_archive; build_archive()")

# The default run fails when it takes longer than TEST_BUDGET_S (tests/conftest.py), so no
# change quietly doubles it; `make test TEST_BUDGET_S=` turns the check off. 15 minutes: on a
# clean clone on one idle 2-core machine the run took 371-408 s on 2 workers (777 s in one process).
TEST_BUDGET_S ?= 900
# Two pytest-xdist workers: one runs the tests on the shared cluster, first and in order, the
# other the rest, module by module (tests/conftest.py); `make test TEST_WORKERS=0` runs one process.
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
test: setup
	@GPUSPARK_TEST_BUDGET_S=$(TEST_BUDGET_S) $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

test-all: setup
	@$(BIN)/python -m pytest -m "" $(PYTEST_ARGS)

# The compatibility run (docs/compatibility.md): a smoke subset (tests/compat, marker `compat`)
# on the lowest pyspark gpuspark supports, in its own venv: CPU torch, constraints.txt without
# its pyspark and py4j pins, pyspark $(PYSPARK_LOW). The README quickstart's time on it and on
# .venv's pyspark 4.x goes to benchmarks/results/compat.json. This is where CI runs the README
# quickstart, on 4.x with its Spark Connect part (`make test` leaves it out: slow;
# tests/test_readme_commands.py).
COMPAT_VENV := .venv-compat
COMPAT_BIN := $(COMPAT_VENV)/bin
COMPAT_STAMP := $(COMPAT_VENV)/.gpuspark-installed
PYSPARK_LOW := 3.5.1
COMPAT_ENV = GPUSPARK_COMPAT_RUN=$$run GPUSPARK_COMPAT_RESULTS=benchmarks/results/compat.json
# COMPAT_BASELINE=0 leaves out the quickstart on .venv's pyspark 4.x (the time to compare with).
COMPAT_BASELINE ?= 1

$(COMPAT_STAMP): pyproject.toml constraints.txt | java
	@test -x $(COMPAT_BIN)/python || $(PY) -m venv $(COMPAT_VENV)
	@$(COMPAT_BIN)/python -m pip install -q --upgrade pip
	@$(COMPAT_BIN)/python -m pip install -q $(TORCH_CPU)
	@grep -v -e '^pyspark==' -e '^py4j==' constraints.txt > $(COMPAT_VENV)/constraints.txt
	@echo 'pyspark==$(PYSPARK_LOW)' >> $(COMPAT_VENV)/constraints.txt
	@$(COMPAT_BIN)/python -m pip install -q -c $(COMPAT_VENV)/constraints.txt \
	  -e ".[dicom,images,text,plot,kubernetes,dev]"
	@touch $(COMPAT_STAMP)

.PHONY: compat-venv test-compat
compat-venv: $(COMPAT_STAMP)

# The quickstart on 4.x runs beside the 3.5 subset (its output follows that subset's): both spend
# most of their time waiting on Spark, and their quickstart times are then taken under one load.
test-compat: setup $(COMPAT_STAMP)
	@run=$${GPUSPARK_COMPAT_RUN:-$$(date +%s)}; base=; \
	if [ "$(COMPAT_BASELINE)" != 0 ]; then \
	  log=$$(mktemp); \
	  $(COMPAT_ENV) $(BIN)/python -m pytest -m compat -k quickstart tests/compat $(PYTEST_ARGS) \
	    > $$log 2>&1 & base=$$!; \
	fi; \
	$(COMPAT_ENV) GPUSPARK_COMPAT_PYSPARK=$(PYSPARK_LOW) \
	  $(COMPAT_BIN)/python -m pytest -m compat tests/compat $(PYTEST_ARGS); rc=$$?; \
	if [ -n "$$base" ]; then \
	  wait $$base || rc=1; echo "test-compat: the README quickstart on .venv's pyspark:"; \
	  cat $$log; rm -f $$log; \
	fi; \
	exit $$rc

# gpuspark as a user installs it (.ci/test-wheel): `python -m build` makes the sdist and the
# wheel, which goes without extras into a fresh venv ($(TORCH_CPU) first); from there --help,
# init, validate, a 2-rank local launch, the package data in use, and `prep dicom`, which must
# name the [dicom] extra in one line. Reuses pip's cache.
.PHONY: test-wheel
test-wheel: setup
	@PYTHON=$(BIN)/python TORCH=$(TORCH_CPU) bash .ci/test-wheel

demo: setup
	@$(BIN)/gpuspark demo

# The container image (Containerfile): CPU variant on a Debian base made here by debootstrap;
# `make image BASE_IMAGE=nvcr.io/nvidia/pytorch:<tag> IMAGE=localhost/gpuspark:gpu` for GPU nodes.
IMAGE ?= localhost/gpuspark:cpu
BASE_IMAGE ?= localhost/gpuspark-base:bookworm
image: setup
	@IMAGE=$(IMAGE) BASE_IMAGE=$(BASE_IMAGE) TORCH=$(TORCH_CPU) PYTHON=$(BIN)/python deploy/image/build.sh

lint: setup
	@$(BIN)/ruff check src tests benchmarks examples docs/gen_reference.py
	@$(BIN)/ruff format --check src tests benchmarks examples docs/gen_reference.py
	@$(BIN)/mypy
	@$(BIN)/lint-imports --no-cache
	@$(MAKE) --no-print-directory docs

# The documentation site (mkdocs.yml): the pages of docs/ plus those generated when it is
# built (the CLI reference, the environment variables, the doctor catalogue, the API from the
# docstrings: docs/gen_reference.py and mkdocstrings), into build/site. --strict: a broken
# link, anchor or docstring reference fails it.
.PHONY: docs
docs: setup
	@NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

clean:
	rm -rf $(VENV) $(COMPAT_VENV) build src/*.egg-info .pytest_cache .ruff_cache .mypy_cache
