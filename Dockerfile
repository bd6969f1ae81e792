# syntax=docker/dockerfile:1
# Two images from one file (the versions are build args):
#   docker build --target operator -t ghcr.io/scaletrain/operator:0.1.0 .
#   docker build --target trainer  -t ghcr.io/scaletrain/trainer:0.1.0 .
# The trainer base must ship the torch version the package pins (pyproject.toml, extra `train`),
# so that installing the package reuses it instead of downloading another multi-GB build.
# Both bases can be overridden (PYTHON_BASE for the wheel and operator stages, TRAINER_BASE for the
# trainer), e.g. with local stand-ins where no registry can be reached: tests/images/build.sh
# (`make images`) builds them with debootstrap and passes them with buildah bud --build-arg.
# The pip steps keep their downloads in a build cache mount (BuildKit; buildah bud honours it too).
ARG PYTHON_VERSION=3.11
ARG TORCH_VERSION=2.13.0
ARG CUDA_VERSION=12.8
ARG CUDNN_VERSION=9
# The wheel's and the operator's base: the official slim Python image.
ARG PYTHON_BASE=python:${PYTHON_VERSION}-slim
# The trainer's base: a PyTorch CUDA runtime with the pinned torch. A CPU-only image (e.g. for a kind
# cluster) can start from python:${PYTHON_VERSION}-slim with TORCH_EXTRA_INDEX_URL set to the CPU wheels.
ARG TRAINER_BASE=pytorch/pytorch:${TORCH_VERSION}-cuda${CUDA_VERSION}-cudnn${CUDNN_VERSION}-runtime

# ---- the scaletrain wheel, built once for both images
FROM ${PYTHON_BASE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY trainer/ trainer/
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The trainer installs the wheel with its `train` extra (the pinned torch) through a requirements file,
# plus `hf` (model.name: hf, the export command), `tensorboard` (training.tensorboard) and `s3` (s3:// URLs).
RUN --mount=type=cache,target=/root/.cache/pip \
    pip wheel --no-deps --wheel-dir /wheels . \
    && printf '%s[train,hf,tensorboard,s3]\n' /wheels/scaletrain-*.whl > /wheels/trainer-requirements.txt

# ---- operator: slim Python with kopf and the kubernetes client; no torch
FROM ${PYTHON_BASE} AS operator
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=wheel /wheels /wheels
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install /wheels/scaletrain-*.whl && rm -rf /wheels
# A numeric non-root user, so that the chart's runAsNonRoot can be verified by the kubelet.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["scaletrain-operator"]

# ---- trainer: the PyTorch CUDA runtime, the package with its training extras, torchrun
FROM ${TRAINER_BASE} AS trainer
ARG TORCH_VERSION
ARG TORCH_EXTRA_INDEX_URL=""
ARG TRAINER_UID=10001
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=wheel /wheels /wheels
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install ${TORCH_EXTRA_INDEX_URL:+--extra-index-url "${TORCH_EXTRA_INDEX_URL}"} \
        --requirement /wheels/trainer-requirements.txt "torch==${TORCH_VERSION}" \
    && rm -rf /wheels \
    && groupadd --gid "${TRAINER_UID}" trainer \
    && useradd --no-log-init --uid "${TRAINER_UID}" --gid "${TRAINER_UID}" --create-home trainer
WORKDIR /workspace
RUN chown "${TRAINER_UID}:${TRAINER_UID}" /workspace
USER ${TRAINER_UID}:${TRAINER_UID}
# ScaleTrainJob pods run `python -m scaletrain_trainer.launch` (config checks, then torchrun); run by
# hand, the image is torchrun, e.g. `docker run IMAGE --nproc-per-node 2 -m scaletrain_trainer`.
ENTRYPOINT ["torchrun"]
CMD ["--help"]
