# The two commands a new user types: `make run` and `make test`.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
KERNELS := $(wildcard pyx/*.pyx pyx/*.pxd pyx/*.h)

.PHONY: run install clients test bench fuzz clean

$(VPY):
	$(PY) -m venv $(VENV)

# Debian packages the build needs (zlib for the CRC in the codec kernel); installed when missing.
.deps/debian:
	@test -f /usr/include/zlib.h || (apt-get update -qq && apt-get install -y -qq zlib1g-dev)
	@mkdir -p .deps && touch $@

$(STAMP): $(VPY) requirements.txt setup.py .deps/debian
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -r requirements.txt
	touch $(STAMP)

# Rebuilt whenever a kernel source changes; the package is installed editable so
# broker/ edits need no rebuild.
$(VENV)/.built: $(STAMP) $(KERNELS) setup.py
	$(VPY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

install: $(VENV)/.built
	@echo "installed: $(VENV)/bin/broker"

run: install
	$(VENV)/bin/broker run --store-root ./data

# Real RocketMQ clients the tests drive, unmodified: npm ali-ons (locked in tests/clients) and PyPI
# rocketmq 0.4.4 (the C++ client) in a venv of its own, since every RocketMQ Python client is
# named `rocketmq`. Node and npm come from Debian when missing.
RQ_VENV := .venv-rocketmq
ONS     := tests/clients/node_modules/.installed

.deps/node:
	@command -v npm >/dev/null || (apt-get update -qq && apt-get install -y -qq nodejs npm)
	@mkdir -p .deps && touch $@

$(ONS): tests/clients/package.json tests/clients/package-lock.json .deps/node
	cd tests/clients && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(RQ_VENV)/.installed:
	$(PY) -m venv $(RQ_VENV)
	$(RQ_VENV)/bin/pip install -q rocketmq==0.4.4
	touch $@

clients: $(ONS) $(RQ_VENV)/.installed

test: install clients
	$(VPY) -m pytest -q tests

bench: install
	$(VPY) -m bench

fuzz: install
	@echo "fuzz harnesses arrive with the hardening issue (#7)"; exit 1

clean:
	rm -rf build $(VENV) $(RQ_VENV) tests/clients/node_modules *.egg-info broker/kernels/*.so pyx/*.c
