# Beacon — entry points for people, CI and tools. `make help` lists them.
SHELL := /bin/bash
SWIFT ?= swift
# ETCD=1 builds etcd fronts in (the Etcd trait: gRPC, swift-nio, BoringSSL); the default build
# has the embedded daemon, the CLI and the client library only.
ETCD ?=
TRAITS = $(if $(ETCD),--traits Etcd)
# Debian's Python, which has the packages below (python3-zmq, python3-protobuf, python3-pytest).
PYTHON ?= /usr/bin/python3
PREFIX ?= /usr/local
DESTDIR ?=
RUN_DIR ?= $(CURDIR)/.run
# The C libraries; protoc, Python's zmq and protobuf and pytest for the interoperability test and
# the Python client; strace and faketime for the tests of the unit's system calls and of
# wall-clock steps; etcd for the etcd client's and fronts' tests, which start clusters of it.
APT_PACKAGES := libzmq3-dev libsqlite3-dev pkg-config protobuf-compiler python3-zmq python3-protobuf python3-pytest strace faketime sqlite3 passwd util-linux iproute2 etcd-server etcd-client openssl python3-prometheus-client curl tmux mypy python3-hatchling python3-pip

.PHONY: help deps build release run test test-etcd test-race soak-core soak-follower soak-pub soak-etcd bench bench-daemon bench-core bench-client bench-peers bench-scale bench-flood bench-fuzz bench-compaction bench-crash bench-relay bench-etcd bench-python man completions install proto clean

help:
	@echo "make deps          install the Debian packages Beacon needs (apt-get)"
	@echo "make run           build, start beacond on embedded defaults, show it working"
	@echo "make test          run every test (the command CI runs)"
	@echo "make test-etcd     the etcd fronts' tests, in a build with etcd (CI runs it too); ETCD=1 builds any target with etcd fronts"
	@echo "make test-race     run every test under ThreadSanitizer (CI runs it too)"
	@echo "make soak-core     the reactive core against its reference model, 100,000 random graphs"
	@echo "make soak-follower the client follower core against a simulated lossy daemon, 50,000 runs"
	@echo "make soak-pub      beacon pub under daemon stops, kill -9, new journals and a relay's lost upstream: 25 trials, no hole, duplicate or reordering"
	@echo "make soak-etcd     two etcd fronts under a writer while the etcd leader is killed 10 times: nothing acknowledged lost or applied twice"
	@echo "make bench         run all benchmarks (release build)"
	@echo "make bench-daemon  beacond write rate and latency vs raw libzmq"
	@echo "make bench-core    BeaconSignals on the js-reactivity-benchmark cases"
	@echo "make bench-client  client library: write-to-effect latency, mirror throughput, memory"
	@echo "make bench-peers   Beacon beside raw libzmq, Mosquitto and Redis on one workload"
	@echo "make bench-scale   catch-up after 1M missed changes, journal size, start-up and memory with 1M keys"
	@echo "make bench-flood   root's write latency while another peer floods writes, sessions, connections, subscriptions, unread replies and publications"
	@echo "make bench-fuzz    3,000,000 random and mutated frames on every socket: no crash, bounded memory"
	@echo "make bench-compaction  request round trips while beacond compacts 2,000,000 changes"
	@echo "make bench-crash   300 kill -9 trials on refusals decided against pipelined writes"
	@echo "make bench-relay   latency per relay hop; fan-out through relays vs all on the primary"
	@echo "make bench-etcd    writes through an etcd front vs direct gRPC puts and its transaction followed; front → front latency vs put → watch; CPU per write beside etcd's; consistent vs plain reads"
	@echo "make bench-python  the Python client's mirror: updates/s and write → callback latency vs raw pyzmq"
	@echo "make man           man pages for beacon and beacond, generated from the command definitions"
	@echo "make completions   bash, zsh and fish completions for beacon"
	@echo "make install       install binaries, unit, config, man pages, completions (PREFIX, DESTDIR honoured)"
	@echo "make proto         regenerate the Swift and Python code from proto/*.proto"

# Installs the C libraries from Debian when they are missing (needs root or sudo).
deps:
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(APT_PACKAGES); \
	fi

build: deps
	$(SWIFT) build $(TRAITS)

release: deps
	$(SWIFT) build $(TRAITS) -c release

# Starts beacond with a local journal and sockets under .run/, writes and watches a few
# signals with the beacon CLI, then keeps the daemon in the foreground until Ctrl-C.
# Builds only what the demo runs (not the benchmarks).
run: deps
	$(SWIFT) build $(TRAITS) --product beacond
	$(SWIFT) build $(TRAITS) --product beacon
	$(SWIFT) build $(TRAITS) --product beacon-example
	@scripts/run-demo.sh "$$($(SWIFT) build $(TRAITS) --show-bin-path)" "$(RUN_DIR)"

# The Swift suite, then the Python client's against the same build's daemons.
test: deps
	$(SWIFT) build $(TRAITS) --build-tests
	$(SWIFT) test $(TRAITS) --parallel --num-workers 2
	BEACON_BIN_DIR="$$($(SWIFT) build $(TRAITS) --show-bin-path)" $(PYTHON) -m pytest -q -p no:cacheprovider clients/python/tests

# The etcd fronts' tests, in a build with the Etcd trait; CI runs it after `make test`.
test-etcd: ETCD := 1
test-etcd: deps
	$(SWIFT) build $(TRAITS) --build-tests
	$(SWIFT) test $(TRAITS) --skip-build --parallel --num-workers 2 --filter Etcd

# The whole suite built with ThreadSanitizer in its own build folder; a race in the test process
# or in a beacond it starts stops that process with an error. One test at a time: instrumented
# processes run several times slower, and side by side on two cores they starve each other
# into timeouts. scripts/tsan-suppressions.txt says which reports are not races.
test-race: deps
	BEACON_SANITIZED_RUN=1 TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/scripts/tsan-suppressions.txt" \
	  $(SWIFT) test $(TRAITS) --no-parallel --sanitize=thread --scratch-path .build-tsan

# The reactive core's reference-model test on 100,000 random graphs (6,000,000 steps; `make test`
# runs 1,000). SOAK_BASE picks another range of seeds.
SOAK_GRAPHS ?= 100000
SOAK_BASE ?= 1000000
soak-core: deps
	$(SWIFT) build $(TRAITS) --build-tests
	BEACON_MODEL_GRAPHS=$(SOAK_GRAPHS) BEACON_MODEL_BASE=$(SOAK_BASE) $(SWIFT) test $(TRAITS) --skip-build --filter ReferenceModelTests

# The follower core's model test on 50,000 generated runs of drops, repairs and resyncs
# (`make test` runs 1,000).
soak-follower: deps
	$(SWIFT) build $(TRAITS) --build-tests
	BEACON_FOLLOWER_CASES=50000 $(SWIFT) test $(TRAITS) --skip-build --filter FollowerCoreModelTests

# beacon pub of 20,000 lines while its daemon is stopped, killed or given a new journal at a
# random point, 21 trials: fails on a hole, a duplicate, a line out of order or a line sent to
# the new journal.
soak-pub: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" pub-restarts

# Two etcd fronts under a writer through both while the etcd leader is killed 10 times
# (`make test` kills it 3 times); ETCD_LEADER_KILLS sets how many.
ETCD_LEADER_KILLS ?= 10
soak-etcd: ETCD := 1
soak-etcd: deps
	$(SWIFT) build $(TRAITS) --build-tests
	BEACON_ETCD_LEADER_KILLS=$(ETCD_LEADER_KILLS) $(SWIFT) test $(TRAITS) --skip-build --filter killingTheEtcdLeaderLosesNoAcknowledgedWriteAndAppliesNoneTwice

bench: bench-core bench-daemon bench-client bench-peers bench-scale bench-flood bench-fuzz bench-compaction bench-crash bench-relay bench-etcd bench-python

# The reactive core's benchmark is a package of its own (Benchmarks/), with OpenCombine.
bench-core:
	$(SWIFT) build -c release --package-path Benchmarks --product beacon-signals-bench
	"$$($(SWIFT) build -c release --package-path Benchmarks --show-bin-path)/beacon-signals-bench"

bench-daemon: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" daemon

bench-client: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" client

# Beacon beside raw libzmq, Mosquitto and Redis on one workload (the peers from Debian:
# apt-get install mosquitto redis-server; a missing one is left out with a message).
bench-peers: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" peers

# Catch-up after 1,000,000 missed changes, journal size per change, start-up and memory with
# 1,000,000 keys.
bench-scale: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" scale

# A well-behaved client's write latency alone and while another peer (a CURVE key) floods,
# with the flooder's write rate limited and not.
bench-flood: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" flood

# 3,000,000 random and mutated frames on the request socket, the publish socket and the raw ipc
# streams of a daemon under an access policy; fails on a crash, a lost reply, a changed guarded
# key or memory growth.
bench-fuzz: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" fuzz

bench-compaction: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" compaction

# 300 kill -9 trials: beacond killed the moment a refusal decided against pipelined writes
# arrives; fails if anything such an answer said is gone after the restart.
bench-crash: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" crash-replies

# The Python client: updates/s into one mirror and write → callback latency, beside raw pyzmq.
bench-python: release
	$(PYTHON) clients/python/bench_mirror.py "$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)"

# A primary and two relays on loopback tcp: the latency each hop adds beside a raw libzmq tcp
# hop and a commit, and fan-out through the relays against every subscriber on the primary.
bench-relay: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" relay

# Writes through an etcd front beside the same Swift gRPC client putting to etcd directly and
# sending the front's own transactions while both fronts follow them; a write at one front →
# diff at another's subscriber beside etcd's put → watch event.
bench-etcd: ETCD := 1
bench-etcd: release
	"$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)/beacon-bench" etcd

# Man pages from the swift-argument-parser definitions (the plugin builds in release mode).
man: release
	$(SWIFT) package generate-manual
	@mkdir -p .build/man && cp .build/plugins/GenerateManual/outputs/BeaconCLI/beacon.1 .build/plugins/GenerateManual/outputs/beacond/beacond.1 .build/man/
	@# The generator puts a "subcommand" argument into every synopsis; beacond has none.
	@sed -i '/^\.Sh SYNOPSIS/,/^\.Sh DESCRIPTION/{/^\.Ar subcommand$$/d}' .build/man/beacond.1
	@echo "man pages in .build/man"

completions: release
	@mkdir -p .build/completions; bin="$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)"; \
	for shell in bash zsh fish; do "$$bin/beacon" --generate-completion-script $$shell > .build/completions/beacon.$$shell; done
	@echo "completions in .build/completions"

install: release man completions
	@bin="$$($(SWIFT) build $(TRAITS) -c release --show-bin-path)"; \
	install -d "$(DESTDIR)$(PREFIX)/bin" "$(DESTDIR)/etc/beacon" \
	  "$(DESTDIR)/usr/lib/systemd/system" "$(DESTDIR)/usr/lib/sysusers.d" "$(DESTDIR)/usr/lib/tmpfiles.d"; \
	install -m 0755 "$$bin/beacond" "$$bin/beacon" "$(DESTDIR)$(PREFIX)/bin/"; \
	sed -e "s|@BINDIR@|$(PREFIX)/bin|g" -e "s|@DOCDIR@|$(PREFIX)/share/doc/beacon|g" deploy/beacond.service \
	  > "$(DESTDIR)/usr/lib/systemd/system/beacond.service"; \
	install -m 0644 deploy/beacon.sysusers "$(DESTDIR)/usr/lib/sysusers.d/beacon.conf"; \
	install -m 0644 deploy/beacon.tmpfiles "$(DESTDIR)/usr/lib/tmpfiles.d/beacon.conf"; \
	[ -e "$(DESTDIR)/etc/beacon/beacond.conf" ] || install -m 0644 deploy/beacond.conf "$(DESTDIR)/etc/beacon/beacond.conf"; \
	install -d "$(DESTDIR)$(PREFIX)/share/man/man1" "$(DESTDIR)$(PREFIX)/share/bash-completion/completions" \
	  "$(DESTDIR)$(PREFIX)/share/zsh/site-functions" "$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d"; \
	install -m 0644 .build/man/beacon.1 .build/man/beacond.1 "$(DESTDIR)$(PREFIX)/share/man/man1/"; \
	install -m 0644 .build/completions/beacon.bash "$(DESTDIR)$(PREFIX)/share/bash-completion/completions/beacon"; \
	install -m 0644 .build/completions/beacon.zsh "$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_beacon"; \
	install -m 0644 .build/completions/beacon.fish "$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/beacon.fish"; \
	install -d "$(DESTDIR)$(PREFIX)/share/doc/beacon/docs"; \
	install -m 0644 README.md "$(DESTDIR)$(PREFIX)/share/doc/beacon/"; \
	install -m 0644 docs/*.md "$(DESTDIR)$(PREFIX)/share/doc/beacon/docs/"; \
	install -d "$(DESTDIR)$(PREFIX)/share/doc/beacon/examples"; \
	install -m 0644 deploy/relay.conf deploy/etcd-front.conf deploy/etcd-front.service.conf "$(DESTDIR)$(PREFIX)/share/doc/beacon/examples/"; \
	echo "installed into $(DESTDIR)$(PREFIX) and $(DESTDIR)/etc, $(DESTDIR)/usr/lib"; \
	echo "next, as root: systemd-sysusers beacon.conf   # the beacon user and group"; \
	echo "               systemd-tmpfiles --create beacon.conf"; \
	echo "               systemctl daemon-reload && systemctl enable --now beacond"; \
	echo "               edit /etc/beacon/beacond.conf, then systemctl reload beacond"

proto:
	scripts/generate-proto.sh

clean:
	rm -rf .build .run
