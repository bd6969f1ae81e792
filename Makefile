# Set-up and checks. Everything installs into .venv; torch is installed first with an exact pin,
# because a bare `torch` requirement would pull a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup run-local lint control-plane test test-fast generate render clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install --quiet -e '.[train,dev]'
	touch $(STAMP)

setup: $(STAMP)

# The main job on this machine: the 2-node CPU/gloo example, one torchrun per node (a fresh run each time).
run-local: setup
	$(BIN)/scaletrain run-local examples/cpu-gloo.yaml --fresh

lint: setup
	$(BIN)/ruff check operator trainer tests examples bench
	$(BIN)/ruff format --check operator trainer tests examples bench

# The real Kubernetes control plane the tests start (kube-apiserver, etcd, controller-manager, scheduler),
# built from Go modules into ~/.cache/scaletrain once (~7 min on 2 CPUs); a no-op when up to date.
control-plane:
	tests/controlplane/build.sh

# Every tier: unit, integration and e2e (README, "Development"). Without Go, the control-plane tests
# skip (outside CI) rather than stopping the other tiers.
test: export CONTROL_PLANE_OPTIONAL = 1
test: lint control-plane
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The fast lane: the unit tier alone (pure, no processes), well under a minute.
test-fast: setup
	$(BIN)/python -m pytest tests/unit -m unit $(PYTEST_ARGS)

# Regenerate the checked-in files made from code (tests fail while any is stale): the CRD from the
# pydantic models, its copy in the Helm chart, and the chart's RBAC rules from the operator's table.
generate: setup
	$(BIN)/scaletrain crd > crds/scaletrainjob.yaml
	cp crds/scaletrainjob.yaml charts/scaletrain/crds/scaletrainjob.yaml
	$(BIN)/python -m scaletrain_operator.controller.rbac > charts/scaletrain/files/rbac-rules.yaml

# Validate and render the CPU example without a cluster.
render: setup
	$(BIN)/scaletrain validate examples/*.yaml
	$(BIN)/scaletrain render examples/cpu-gloo.yaml

clean:
	rm -rf $(VENV) .pytest_cache
