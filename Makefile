# In-network aggregation on BMv2. `make help` lists the targets.
TOPO ?= topologies/figure1.yaml
# The job of the topology's demo: a planned one on the leaf-spine fabric.
JOB ?= $(if $(findstring leaf-spine-2x4.yaml,$(TOPO)),jobs/leaf-spine-sum.yaml,jobs/figure1-sum.yaml)
# make demo FAIL="switch spine1" (or "link leaf1 spine1"): fail it mid-AllReduce.
FAIL ?=
SIZE ?= $(if $(FAIL),1000000,1000)
# make soak SOAK_MINUTES=M SOAK_SEED=S: minutes of calls per topology, and the seed.
SOAK_MINUTES ?= 2
SOAK_SEED ?= 1
# make teardown JOB_ID=N: by id; otherwise the job of JOB.
JOB_ID ?=
BUILD ?= build
VENV ?= .venv
P4RT_VENV ?= .venv-p4rt
P4RT_SHELL ?= p4runtime-shell==0.0.6
PY := $(VENV)/bin/python
SYSTEM_PYTHON := $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
# tshark: the Wireshark dissector's tests (tests/test_wireshark.py); iperf3: the TCP flow
# of make bench-congestion.
# g++, python3-dev: the torch backend's C++ half (ina.torch.native), built with torch's
# headers.
APT_PACKAGES := mininet iputils-ping iproute2 ethtool util-linux nftables tshark iperf3 \
  g++ python3-dev
# Answers to the packages' questions, so that apt-get asks none: whether non-root users
# may capture (wireshark-common asks it while tshark installs; no: root runs the lab).
APT_PRESEED := wireshark-common wireshark-common/install-setuid boolean false
P4C ?= p4c-bm2-ss
P4_SOURCES := $(wildcard p4src/*.p4 p4src/include/*.p4)


.PHONY: help setup build run deploy teardown status demo bench bench-dataplane bench-loss bench-deploy bench-failover bench-collectives bench-congestion bench-accuracy soak train figures simulate test lint clean

help:
	@echo "make setup     Debian packages (as root) and the Python venv ($(VENV))"
	@echo "make build     generate p4src/include/generated.p4 and compile the P4 program"
	@echo "make run       Mininet + BMv2 for TOPO=$(TOPO) in private namespaces (CLI)"
	@echo "make deploy    deploy JOB=$(JOB) on the running lab"
	@echo "make status    per-switch entries and counters of the running lab"
	@echo "make teardown  remove JOB=$(JOB) (or JOB_ID=N) from the running lab"
	@echo "make demo      the Figure 1 AllReduce end to end (BMv2 if present, else the model);"
	@echo "               TOPO=topologies/leaf-spine-2x4.yaml FAIL=\"switch spine1\": a spine fails mid-AllReduce"
	@echo "make bench     INA vs parameter server vs ring, CPU- and link-bound (Figure 1, fat-tree)"
	@echo "make bench-dataplane  one switch: aggregation vs plain forwarding, packets/s"
	@echo "make bench-loss    INA under 1% and 5% loss per link against no loss, links"
	@echo "                   unlimited and at 4 Mbit/s (docs/loss.json, docs/loss.png)"
	@echo "make bench-deploy  deploy time on the k=4 fat-tree, concurrent vs one by one"
	@echo "make bench-failover  a VAT switch stopped mid-AllReduce: detection, repair, slowdown"
	@echo "make bench-collectives  every collective: INA vs gloo vs the ring on hosts, CPU- and"
	@echo "               link-bound, float16 AllReduce in 16 and 32 bits (Figure 1, fat-tree)"
	@echo "make bench-congestion  INA and a TCP bulk flow (iperf3) on one bottleneck, then"
	@echo "               INA alone: each one's rate, INA's window, the queue, the marks"
	@echo "make bench-accuracy  16-bit float sums through ina (32- and 16-bit elements) against"
	@echo "               gloo's and the exact sum, 2 and 4 ranks (embedded network: no BMv2)"
	@echo "make soak      chaos soak: AllReduce calls while switches and links fail at random,"
	@echo "               a member misbehaves and an outsider sends garbage (docs/soak.json)"
	@echo "make train     DDP and HSDP training with the ina backend against gloo on Mininet"
	@echo "               (Figure 1, fat-tree; HSDP: fat-tree, 2 replicas of 4 shards)"
	@echo "make figures   redraw docs/*.png from docs/*.json (no benchmark run, no BMv2)"
	@echo "make simulate  planned jobs on k=4..16 fat-trees on the reference model"
	@echo "make test      every test tier the machine can run"
	@echo "make lint      ruff and mypy --strict over the package and the tests"

setup:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then echo "$(APT_PRESEED)" | debconf-set-selections && \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q --no-install-recommends $$missing; fi; \
	else echo "setup: not root or no apt-get: install $(APT_PACKAGES) yourself"; fi
	$(SYSTEM_PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,train]'
	@# The torch backend's C++ half, built once per torch version (ina.torch.native).
	$(PY) -c 'import ina.torch.native as n; print("built:", n.load().__file__)'
	@# p4runtime-shell, to inspect the switches (docs/inspect.md), in a venv of its own: its
	@# protobuf cannot share one with finsy's. Optional: setup goes on without it.
	@$(P4RT_VENV)/bin/python -c "import p4runtime_sh" 2>/dev/null || { $(SYSTEM_PYTHON) -m venv $(P4RT_VENV) && \
	  $(P4RT_VENV)/bin/pip install -q $(P4RT_SHELL); } || \
	  echo "setup: $(P4RT_SHELL) not installed in $(P4RT_VENV): docs/inspect.md's shell and its test skip"
	@command -v $(P4C) >/dev/null || echo "setup: $(P4C) not found: the BMv2 tiers will skip (see README, 'Toolchain')"
	@command -v simple_switch_grpc >/dev/null || echo "setup: simple_switch_grpc not found: the BMv2 tiers will skip (see README, 'Toolchain')"

p4src/include/generated.p4: controller/ina/protocol/constants.py controller/ina/protocol/lanes.py controller/ina/protocol/p4gen.py
	$(PY) -m ina.protocol.p4gen

$(BUILD)/ina.json: $(P4_SOURCES) p4src/include/generated.p4
	@command -v $(P4C) >/dev/null || { echo "$(P4C) not found: install p4c (see README, 'Toolchain')"; exit 1; }
	mkdir -p $(BUILD)
	$(P4C) --arch v1model --std p4-16 -o $(BUILD)/ina.json \
	  --p4runtime-files $(BUILD)/ina.p4info.txtpb p4src/ina.p4

build: $(BUILD)/ina.json

run: build
	$(VENV)/bin/inalab -t $(TOPO) --build $(BUILD) run

deploy:
	$(VENV)/bin/inalab -t $(TOPO) exec -- $(VENV)/bin/inactl -t $(TOPO) --build $(BUILD) deploy --job $(JOB)

teardown:
	$(VENV)/bin/inalab -t $(TOPO) exec -- $(VENV)/bin/inactl -t $(TOPO) --build $(BUILD) teardown $(if $(JOB_ID),--job-id $(JOB_ID),--job $(JOB))

status:
	$(VENV)/bin/inalab -t $(TOPO) exec -- $(VENV)/bin/inactl -t $(TOPO) --build $(BUILD) status

demo:
	@if command -v $(P4C) >/dev/null; then $(MAKE) --no-print-directory build; fi
	$(VENV)/bin/inalab -t $(TOPO) --build $(BUILD) demo --job $(JOB) --size $(SIZE) $(if $(FAIL),--fail $(FAIL))

bench: build
	$(VENV)/bin/inabench --build $(BUILD) allreduce --json-out docs/allreduce.json --png docs/allreduce.png

bench-dataplane: build
	$(VENV)/bin/inabench --build $(BUILD) dataplane --json-out docs/dataplane.json --png docs/dataplane.png

bench-loss: build
	$(VENV)/bin/inabench --build $(BUILD) loss --rounds 7 --json-out docs/loss.json --png docs/loss.png

bench-failover: build
	$(VENV)/bin/inabench --build $(BUILD) failover --json-out docs/failover.json --png docs/failover.png

bench-collectives: build
	$(VENV)/bin/inabench --build $(BUILD) collectives --json-out docs/collectives.json \
	  --png docs/collectives.png

soak: build
	$(VENV)/bin/inabench --build $(BUILD) soak --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) \
	  --json-out docs/soak.json

train: build
	$(VENV)/bin/inabench --build $(BUILD) train --json-out docs/train.json --png docs/train.png

bench-congestion: build
	$(VENV)/bin/inabench --build $(BUILD) congestion --json-out docs/congestion.json --png docs/congestion.png

bench-accuracy:
	$(VENV)/bin/inabench accuracy --json-out docs/accuracy.json --png docs/accuracy.png

bench-deploy: build
	$(VENV)/bin/inabench --build $(BUILD) deploy

figures:
	$(VENV)/bin/inabench allreduce --from-json docs/allreduce.json --png docs/allreduce.png
	$(VENV)/bin/inabench dataplane --from-json docs/dataplane.json --png docs/dataplane.png
	$(VENV)/bin/inabench failover --from-json docs/failover.json --png docs/failover.png
	$(VENV)/bin/inabench train --from-json docs/train.json --png docs/train.png
	$(VENV)/bin/inabench collectives --from-json docs/collectives.json --png docs/collectives.png
	$(VENV)/bin/inabench congestion --from-json docs/congestion.json --png docs/congestion.png
	$(VENV)/bin/inabench loss --from-json docs/loss.json --png docs/loss.png
	$(VENV)/bin/inabench accuracy --from-json docs/accuracy.json --png docs/accuracy.png

simulate:
	$(PY) -m ina.bench.simulate --k 4 6 8 16

test:
	$(PY) -m ina.lab.sandbox --if-available -- $(PY) -m pytest $(PYTEST_ARGS)

lint:
	$(VENV)/bin/ruff check controller tests
	$(PY) -m mypy

clean:
	rm -rf $(BUILD) .run .pytest_cache .mypy_cache
