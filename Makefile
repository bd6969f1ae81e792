# Set-up and checks. Everything installs into .venv; torch is installed first with an exact pin,
# because a bare `torch` requirement would pull a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup run-local lint control-plane images node-packages cluster cluster-down test test-fast test-node generate render clean test-torch-floor

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
# the node's binaries and the Kueue v0.17.0 manager with its manifests, built from Go modules into
# ~/.cache/scaletrain once (~7 min on 2 CPUs, Kueue ~10 CPU-minutes more); a no-op when up to date.
control-plane:
	tests/controlplane/build.sh

# Both images built from the Dockerfile with buildah (the base images are local stand-ins built with
# debootstrap), and the pause image; cached by content outside the work tree (tests/images/build.sh).
images: control-plane
	tests/images/build.sh

# The Debian packages a real node runs on (containerd, runc, CNI plugins, iptables, conntrack), as root.
node-packages:
	tests/node/packages.sh

# A real Kubernetes here, without Docker: the control plane plus a node (kubelet on containerd and runc,
# kube-proxy, CoreDNS) running the built images, with the chart installed. It stays up; its last line is
# `export KUBECONFIG=...`. `make cluster-down` stops it and removes its state.
cluster: setup images node-packages
	$(BIN)/python -m scaletrain_testing.local_cluster up

cluster-down: setup
	$(BIN)/python -m scaletrain_testing.local_cluster down

# Every tier: unit, integration, e2e and node (README, "Development"). Without Go, or without root and the
# node's packages, those tiers skip (outside CI) rather than stopping the others.
test: export CONTROL_PLANE_OPTIONAL = 1
test: export NODE_OPTIONAL = 1
test: lint control-plane images node-packages
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The node tier alone: the images in containers on a real kubelet (on `make cluster`'s cluster if one is up).
test-node: setup images node-packages
	$(BIN)/python -m pytest tests/node $(PYTEST_ARGS)

# The trainer's tests at the oldest torch it supports (pyproject's range), in a venv of their own: the unit tier
# and the trainer's integration tests (processes, checkpoints, compile). Not part of `make test`: another torch
# is another multi-GB install.
TORCH_FLOOR ?= 2.11.0
FLOOR_VENV ?= .venv-torch-floor
TRAINER_TESTS := tests/integration/test_trainer_*.py tests/integration/test_async_checkpoints.py \
	tests/integration/test_checkpoint_damage.py tests/integration/test_compile.py
test-torch-floor:
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet torch==$(TORCH_FLOOR) 'numpy>=1.26' 'rich>=13'
	$(FLOOR_VENV)/bin/python -m pip install --quiet -e '.[dev]'  # not `train`, whose exact pin would replace torch
	$(FLOOR_VENV)/bin/python -c 'import torch; assert torch.__version__.startswith("$(TORCH_FLOOR)"), torch.__version__'
	$(FLOOR_VENV)/bin/python -m pytest tests/unit -m unit $(PYTEST_ARGS)
	$(FLOOR_VENV)/bin/python -m pytest $(TRAINER_TESTS) $(PYTEST_ARGS)

# The fast lane: the unit tier alone (pure, no processes), well under a minute.
test-fast: setup
	$(BIN)/python -m pytest tests/unit -m unit $(PYTEST_ARGS)

# Regenerate the checked-in files made from code (tests fail while any is stale): the CRD from the
# pydantic models, its copy in the Helm chart, the chart's RBAC rules from the operator's table, and the
# Kubernetes schemas the operator vendors (from kubernetes-validate's, of the pinned version), and the
# fine-tuning example's fixture (a tiny model, its tokenizer, records).
OPENAPI_SUBSET = operator/scaletrain_operator/validation/zz_generated_kube_openapi.py
generate: setup
	$(BIN)/python -m scaletrain_testing.openapi_subset > $(OPENAPI_SUBSET)
	$(BIN)/ruff format --quiet $(OPENAPI_SUBSET)
	$(BIN)/scaletrain crd > crds/scaletrainjob.yaml
	cp crds/scaletrainjob.yaml charts/scaletrain/crds/scaletrainjob.yaml
	$(BIN)/python -m scaletrain_operator.controller.rbac > charts/scaletrain/files/rbac-rules.yaml
	rm -rf examples/finetune-lora
	PYTHONPATH=tests $(BIN)/python -c 'import pathlib, scaletrain_testing.hf_models as m; m.write_finetune_fixture(pathlib.Path("examples/finetune-lora"))'

# Validate and render the CPU example without a cluster.
render: setup
	$(BIN)/scaletrain validate examples/*.yaml
	$(BIN)/scaletrain render examples/cpu-gloo.yaml

clean:
	rm -rf $(VENV) .pytest_cache
