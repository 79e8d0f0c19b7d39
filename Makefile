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


# Each benchmark that writes docs/NAME.json and docs/NAME.png (make bench-NAME); those on
# a lab need the compiled program, accuracy runs on the embedded network, host on none.
LAB_BENCHES := allreduce dataplane loss failover collectives congestion train
FIGURES := $(LAB_BENCHES) accuracy host
BENCH_ARGS_loss := --rounds 7
INABENCH := $(VENV)/bin/inabench --build $(BUILD)
bench_run = $(INABENCH) $(1) $(BENCH_ARGS_$(1)) --json-out docs/$(1).json --png docs/$(1).png

.PHONY: help setup build run deploy teardown status demo bench $(FIGURES:%=bench-%) \
  bench-deploy soak train figures simulate test lint clean

help: ## this list (each target's line after its "##"; "##>" for a pattern's)
	@awk -F':.*## ' '/^[a-z-]+:.*## /{printf "make %-17s %s\n", $$1, $$2} \
	  /^##> /{sub(/^##> /, ""); n = index($$0, ": "); \
	    printf "make %-17s %s\n", substr($$0, 1, n - 1), substr($$0, n + 2)} \
	  /^## /{sub(/^## /, ""); printf "     %-17s %s\n", "", $$0}' $(MAKEFILE_LIST)

setup: ## Debian packages (as root), the Python venv, the torch backend's C++ half
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

build: $(BUILD)/ina.json ## generate p4src/include/generated.p4, compile the P4 program

run: build ## Mininet + BMv2 for TOPO in private namespaces (CLI)
	$(VENV)/bin/inalab -t $(TOPO) --build $(BUILD) run

deploy: ## deploy JOB on the running lab
	$(VENV)/bin/inalab -t $(TOPO) exec -- $(VENV)/bin/inactl -t $(TOPO) --build $(BUILD) deploy --job $(JOB)

teardown: ## remove JOB (or JOB_ID=N) from the running lab
	$(VENV)/bin/inalab -t $(TOPO) exec -- $(VENV)/bin/inactl -t $(TOPO) --build $(BUILD) teardown $(if $(JOB_ID),--job-id $(JOB_ID),--job $(JOB))

status: ## per-switch entries and counters of the running lab
	$(VENV)/bin/inalab -t $(TOPO) exec -- $(VENV)/bin/inactl -t $(TOPO) --build $(BUILD) status

demo: ## the Figure 1 AllReduce end to end (BMv2 if present, else the model)
## TOPO=topologies/leaf-spine-2x4.yaml FAIL="switch spine1": a spine fails mid-way
	@if command -v $(P4C) >/dev/null; then $(MAKE) --no-print-directory build; fi
	$(VENV)/bin/inalab -t $(TOPO) --build $(BUILD) demo --job $(JOB) --size $(SIZE) $(if $(FAIL),--fail $(FAIL))

bench: bench-allreduce ## INA vs parameter server vs ring, CPU- and link-bound (Figure 1, fat-tree)

##> bench-NAME: one benchmark on a lab, NAME one of: allreduce (make bench),
## dataplane (aggregation vs forwarding), loss (1% and 5% loss), failover (a VAT
## switch stopped), collectives (every collective vs gloo and the ring), congestion
## (beside a TCP flow), train
$(LAB_BENCHES:%=bench-%): bench-%: build
	$(call bench_run,$*)

bench-accuracy: ## 16-bit float sums through ina against gloo's and the exact sum (no BMv2)
	$(call bench_run,accuracy)

bench-host: ## one worker against a loopback reflector beside a plain C loop (no BMv2)
	$(call bench_run,host)

train: bench-train ## DDP and HSDP training through ina against gloo on Mininet + BMv2

bench-deploy: build ## deploy time on the k=4 fat-tree, concurrent vs one by one
	$(INABENCH) deploy

soak: build ## AllReduce calls while switches and links fail, a member misbehaves, garbage comes
	$(INABENCH) soak --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) --json-out docs/soak.json

figures: ## redraw docs/*.png from docs/*.json (no benchmark run, no BMv2)
	$(foreach b,$(FIGURES),$(VENV)/bin/inabench $(b) --from-json docs/$(b).json --png docs/$(b).png &&) true

simulate: ## planned jobs on k=4..16 fat-trees on the reference model
	$(PY) -m ina.bench.simulate --k 4 6 8 16

test: ## every test tier the machine can run (PYTEST_ARGS=...: pytest's own)
	$(PY) -m ina.lab.sandbox --if-available -- $(PY) -m pytest $(PYTEST_ARGS)

lint: ## ruff and mypy --strict over the package and the tests
	$(VENV)/bin/ruff check controller tests
	$(PY) -m mypy

clean: ## remove the build, the run directory and the caches
	rm -rf $(BUILD) .run .pytest_cache .mypy_cache
