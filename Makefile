# The two commands a new user types: `make run` and `make test`.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
KERNELS := $(wildcard pyx/*.pyx pyx/*.pxd pyx/*.h)

.PHONY: run install clients testdeps test spark-example bench fuzz clean protocol soak

$(VPY):
	$(PY) -m venv $(VENV)

# apt-get for a Debian package that is missing, one at a time: `make test` sets up with -j, so several
# .deps/ targets can be reached at once and dpkg holds one lock (flock: util-linux, always there).
APT_LOCK := /tmp/.broker-apt.lock
apt_install = flock $(APT_LOCK) sh -c 'apt-get update -qq && apt-get install -y -qq $(1)'

# Debian packages the build needs (zlib for the CRC in the codec kernel, libnghttp2 for the gRPC
# endpoint's HTTP/2 session kernel, OpenSSL's libcrypto for the received bodies' MD5 in the
# receive-reply kernel); installed when missing.
.deps/debian:
	@test -f /usr/include/zlib.h || ($(call apt_install,zlib1g-dev))
	@test -f /usr/include/nghttp2/nghttp2.h || ($(call apt_install,libnghttp2-dev))
	@test -f /usr/include/openssl/evp.h || ($(call apt_install,libssl-dev))
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
	@command -v npm >/dev/null || ($(call apt_install,nodejs npm))
	@mkdir -p .deps && touch $@

$(ONS): tests/clients/package.json tests/clients/package-lock.json .deps/node
	cd tests/clients && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(RQ_VENV)/.installed:
	$(PY) -m venv $(RQ_VENV)
	$(RQ_VENV)/bin/pip install -q rocketmq==0.4.4
	touch $@

# The 5.x Python client (gRPC, through the front `broker proxy`): a venv of its own too.
RQ5_VENV := .venv-rocketmq5

$(RQ5_VENV)/.installed:
	$(PY) -m venv $(RQ5_VENV)
	$(RQ5_VENV)/bin/pip install -q rocketmq-python-client==5.1.2
	touch $@

# The 5.x Node.js client (npm rocketmq-client-nodejs, gRPC): a node_modules of its own, locked in tests/clients5.
NODE5 := tests/clients5/node_modules/.installed

$(NODE5): tests/clients5/package.json tests/clients5/package-lock.json .deps/node
	cd tests/clients5 && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The Java 4.x remoting client (Maven Central org.apache.rocketmq:rocketmq-client, pinned in
# tests/java/pom.xml) and the driver tests/test_java_client.py runs it through: the driver compiled
# to tests/java/target/classes, the client and what it needs copied to tests/java/target/lib. Maven's
# repository is kept under build/m2. A JDK and Maven come from Debian when missing.
JAVA_CLIENTS := tests/java/target/.built
JAVA_SRC     := $(wildcard tests/java/src/main/java/driver/*.java)
# one mvn at a time on the shared repository (Maven 3.8 does not lock it between processes)
MVN          := flock /tmp/.broker-m2.lock mvn -B -q -Dstyle.color=never -Dmaven.repo.local=$(CURDIR)/build/m2

.deps/jdk:
	@(command -v javac >/dev/null && command -v mvn >/dev/null) \
	  || ($(call apt_install,openjdk-17-jdk-headless maven))
	@mkdir -p .deps && touch $@

$(JAVA_CLIENTS): tests/java/pom.xml $(JAVA_SRC) .deps/jdk
	rm -rf tests/java/target/lib
	$(MVN) -f tests/java/pom.xml compile dependency:copy-dependencies
	touch $@

# The Java 5.x gRPC client (Maven Central org.apache.rocketmq:rocketmq-client-java, pinned in
# tests/java5/pom.xml) and its driver for tests/test_java5_client.py: a module of its own, its classes
# sharing package names with the 4.x client's.
JAVA5_CLIENTS := tests/java5/target/.built
JAVA5_SRC     := $(wildcard tests/java5/src/main/java/driver5/*.java)

$(JAVA5_CLIENTS): tests/java5/pom.xml $(JAVA5_SRC) .deps/jdk
	rm -rf tests/java5/target/lib
	$(MVN) -f tests/java5/pom.xml compile dependency:copy-dependencies
	touch $@

# The Go remoting client (github.com/apache/rocketmq-client-go/v2, pinned in tests/go/go.mod and
# go.sum) in its driver build/go/rmqgo; Go's module and build caches under build/go. Go comes from
# Debian when missing.
GO_ENV := GOMODCACHE=$(CURDIR)/build/go/mod GOCACHE=$(CURDIR)/build/go/cache GOFLAGS=-mod=readonly GOTOOLCHAIN=local
RMQGO  := build/go/rmqgo

.deps/go:
	@command -v go >/dev/null || ($(call apt_install,golang-go))
	@mkdir -p .deps && touch $@

$(RMQGO): tests/go/go.mod tests/go/go.sum $(wildcard tests/go/*.go) .deps/go
	@mkdir -p build/go
	cd tests/go && $(GO_ENV) go build -o $(CURDIR)/$(RMQGO) .

# Apache RocketMQ's mqadmin (rocketmq-tools, pinned in tests/mqadmin/pom.xml) and its jars in
# build/mqadmin/lib for tests/test_mqadmin.py; Maven's repository shared in build/m2. The tests start
# it through tests/mqadmin/src/mqadmin/Once.java (mqadmin's own main, then the JVM's exit at once).
MQADMIN := build/mqadmin/.copied

$(MQADMIN): tests/mqadmin/pom.xml tests/mqadmin/src/mqadmin/Once.java .deps/jdk
	rm -rf build/mqadmin/lib build/mqadmin/classes
	$(MVN) -f tests/mqadmin/pom.xml -Dmqadmin.lib=$(CURDIR)/build/mqadmin/lib dependency:copy-dependencies
	javac -cp '$(CURDIR)/build/mqadmin/lib/*' -d build/mqadmin/classes tests/mqadmin/src/mqadmin/Once.java
	touch $@

# Apache RocketMQ's own name server, broker and proxy (tests/javabroker/pom.xml, pinned): the reference
# broker the differential, migration and HA-interop tests and the bench run beside ours
JAVABROKER := build/javabroker/.copied

$(JAVABROKER): tests/javabroker/pom.xml .deps/jdk
	rm -rf build/javabroker/lib
	$(MVN) -f tests/javabroker/pom.xml -Djavabroker.lib=$(CURDIR)/build/javabroker/lib dependency:copy-dependencies
	touch $@

clients: $(ONS) $(NODE5) $(RQ_VENV)/.installed $(RQ5_VENV)/.installed $(JAVA_CLIENTS) $(JAVA5_CLIENTS) $(RMQGO) $(MQADMIN) $(JAVABROKER)

# The gRPC front's stubs (broker/proxy/protocol/*_pb2*.py, committed) regenerated from the vendored
# .proto files of apache/rocketmq-apis (proto/apache/rocketmq/v2): grpcio-tools, then the generated
# `from apache.rocketmq.v2 import` made package-relative.
GRPC_TOOLS := grpcio-tools==1.85.1
PROTOS     := proto/apache/rocketmq/v2/definition.proto proto/apache/rocketmq/v2/service.proto

protocol: $(STAMP)
	$(VPY) -m pip install -q $(GRPC_TOOLS)
	rm -rf build/proto && mkdir -p build/proto
	$(VPY) -m grpc_tools.protoc -Iproto --python_out=build/proto --grpc_python_out=build/proto $(PROTOS)
	for f in build/proto/apache/rocketmq/v2/definition_pb2.py build/proto/apache/rocketmq/v2/service_pb2*.py; do \
	  sed 's/^from apache\.rocketmq\.v2 import/from broker.proxy.protocol import/' $$f > broker/proxy/protocol/$$(basename $$f); done

# What only the tests need: PySpark (issue 8), redis-py and psycopg (issue 9), atheris (issue 7),
# and the real Redis and PostgreSQL servers the tests (and the bench) start on loopback, from Debian
# when missing.
.deps/servers:
	@command -v redis-server >/dev/null && (command -v postgres >/dev/null || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1) \
	  || ($(call apt_install,redis-server postgresql))
	@mkdir -p .deps && touch $@

$(VENV)/.testdeps: $(STAMP) requirements-test.txt requirements-spark.txt requirements-reliable.txt | $(VENV)/.built
	$(VPY) -m pip install -q -r requirements-test.txt
	touch $@

# The network-fault tests (tests/test_netns_partitions.py) give each broker a network namespace of
# its own (iproute2's `ip netns`) and drop packets with nftables' `nft`, from Debian when missing.
# Delay and reordering need no package: tests/helpers/wire.py switches frames between TAP devices.
.deps/netns:
	@(command -v ip >/dev/null && command -v nft >/dev/null) \
	  || ($(call apt_install,iproute2 nftables))
	@mkdir -p .deps && touch $@

testdeps: $(VENV)/.testdeps .deps/servers .deps/java .deps/netns

# The set-up's downloads and builds (pip, npm, Maven, Go, apt) run side by side (-j, logs kept per target);
# pip into one venv, mvn on one repository and apt-get go one at a time by order or lock.
SETUP_JOBS ?= 6
test:
	$(MAKE) -j$(SETUP_JOBS) --output-sync=target install clients testdeps build/loadgen build/grpc_receive
	$(VPY) -m pytest -q tests

# The Spark example of docs/spark.md end to end (examples/spark_example.sh) against the name server and
# broker `make run` serves (NAMESRV=host:port for others): PySpark from requirements-spark.txt
# (the pins requirements-test.txt includes), and Java when missing.
NAMESRV ?= 127.0.0.1:9876

.deps/java:
	@command -v java >/dev/null || ($(call apt_install,openjdk-17-jre-headless))
	@mkdir -p .deps && touch $@

$(VENV)/.sparkdeps: $(STAMP) requirements-spark.txt
	$(VPY) -m pip install -q -r requirements-spark.txt
	touch $@

spark-example: install $(VENV)/.sparkdeps .deps/java
	NAMESRV='$(NAMESRV)' VENV='$(VENV)' sh examples/spark_example.sh

# The C load generator the network cells of the bench drive the broker with (bench/loadgen.c):
# libc only, so that the driver costs the bench ~1 CPU-us per message, not the broker's share.
build/loadgen: bench/loadgen.c bench/bench_common.h
	@mkdir -p build
	cc -O2 -Wall -Wextra -o $@ $<

# The C driver of the gRPC front's consume cell (bench/grpc_receive.c): ReceiveMessage + AckMessage
# on libnghttp2's client API (libnghttp2-dev, which the front's h2_session kernel links already),
# so that the driver is not the bound the grpc.aio driver was (~35 CPU-us per message of its own).
build/grpc_receive: bench/grpc_receive.c bench/bench_common.h
	@mkdir -p build
	cc -O2 -Wall -Wextra -o $@ $< -lnghttp2

# What the bench needs beyond `make install`: redis-py and psycopg (requirements-reliable.txt) and
# the real Redis and PostgreSQL servers for its broker.reliable section; redis-benchmark comes with
# Debian's redis-server; the peers (NATS) are installed by bench/peers.py when missing. The run
# publishes its report and plots to docs/bench/ (latest.md, *.png); a section that fails is
# reported as failed there, beside the others' figures, and makes the run exit non-zero.
$(VENV)/.benchdeps: $(STAMP) requirements-reliable.txt
	$(VPY) -m pip install -q -r requirements-reliable.txt
	touch $@

bench: install build/loadgen build/grpc_receive $(VENV)/.benchdeps .deps/servers $(JAVABROKER)
	@command -v h2load >/dev/null || ($(call apt_install,nghttp2-client))  # the gRPC cell's C driver
	$(VPY) -m bench

# The soak (soak/, docs/soak.md): a DLedger group and a master/slave group under the project's
# Producer at a fixed rate and the real Java 4.x and Python 5.x (gRPC front) clients, a fault every
# SOAK_FAULT_EVERY seconds, RSS / descriptors / latency sampled, then every acknowledged message
# checked; the figure goes to docs/soak/. Not part of `make test`: it runs for SOAK_HOURS hours.
SOAK_HOURS ?= 24

soak: install $(VENV)/.testdeps $(JAVA_CLIENTS) $(RQ5_VENV)/.installed .deps/java
	SOAK_HOURS=$(SOAK_HOURS) $(VPY) -m soak

# Fuzzing (tools/fuzz/): the kernels built twice more from the same sources, each in its own
# folder and loaded through BROKER_KERNELS_DIR: clang with ASan and libFuzzer's coverage hooks
# (gcc cannot emit them) for atheris, and gcc's ASan for a run of the hypothesis suites.
FUZZ_SECONDS ?= 60

.deps/clang:
	@command -v clang >/dev/null && ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.asan-x86_64.a >/dev/null 2>&1 \
	  || ($(call apt_install,clang libclang-rt-14-dev))
	@mkdir -p .deps && touch $@

build-fuzz/.built: $(VENV)/.built $(KERNELS) setup.py .deps/clang
	CC=clang CXX=clang++ LDSHARED="clang -shared" BROKER_BUILD=fuzz $(VPY) setup.py -q build_ext \
	  --build-lib build-fuzz --build-temp build-fuzz/tmp
	touch $@

build-asan/.built: $(VENV)/.built $(KERNELS) setup.py
	BROKER_BUILD=asan $(VPY) setup.py -q build_ext --build-lib build-asan --build-temp build-asan/tmp
	touch $@

fuzz: install testdeps build-fuzz/.built build-asan/.built
	$(VPY) tools/fuzz/run.py --seconds $(FUZZ_SECONDS)

clean:
	rm -rf build build-fuzz build-asan $(VENV) $(RQ_VENV) $(RQ5_VENV) tests/clients/node_modules tests/clients5/node_modules *.egg-info broker/kernels/*.so pyx/*.c
