# syntax=docker/dockerfile:1
# accel-gateway: a KServe V2 / Triton-protocol inference gateway.
#
#   docker build -t accel-gateway .                                   CPU, ONNX Runtime
#   docker build --build-arg EXTRAS=onnx,torch,tvm,opencl -t accel-gateway:full .
#   docker build --build-arg BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04 \
#     --build-arg EXTRAS=onnx,gpu,torch --build-arg TORCH_INDEX_URL= \
#     --build-arg EXTRA_PACKAGES=onnxruntime-gpu -t accel-gateway:cuda .
#
#   docker run -p 8000-8002:8000-8002 -v "$PWD/model_repository:/models:ro" accel-gateway
#   docker run IMAGE serve               SageMaker: --sagemaker on :8080, models in /opt/ml/model
#   docker run IMAGE accel-gateway compile ...   any other command runs as given
#
# Build arguments:
#   BASE_IMAGE       both stages' base; it must provide Python 3.11, or apt-get to install it
#                    (Ubuntu 22.04, which the nvidia/cuda images above are built on).
#   EXTRAS           pip extras of accel-gateway (pyproject's optional-dependencies). opencl
#                    (and models, test) add Debian's PoCL, tvm (and models, test) add gcc,
#                    which TVM links its compiled libraries with.
#   TORCH_INDEX_URL  where torch comes from when EXTRAS asks for it; the default is the CPU
#                    build. Empty: PyPI's Linux build, which bundles CUDA.
#   EXTRA_PACKAGES   further pip requirements, e.g. onnxruntime-gpu (which replaces
#                    onnxruntime) or onnxruntime-openvino.

ARG BASE_IMAGE=python:3.11.14-slim-bookworm
ARG EXTRAS=onnx
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG EXTRA_PACKAGES=""

# ---- Python 3.11 on the base image (shared by both stages, so the venv's interpreter path
# is the same in the builder and at run time)
FROM ${BASE_IMAGE} AS python
ARG DEBIAN_FRONTEND=noninteractive
# Debian and Ubuntu packages follow their release's security updates: the base image's tag is
# the pin (DL3008).
# hadolint ignore=DL3008
RUN if ! command -v python3.11 >/dev/null 2>&1; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3.11 --version

# ---- builder: accel-gateway and the extras' packages, installed into /opt/venv
FROM python AS builder
ARG EXTRAS
ARG TORCH_INDEX_URL
ARG EXTRA_PACKAGES
ENV PATH=/opt/venv/bin:${PATH}
# After the ARGs and ENVs: hadolint 2.15 forgets a SHELL that an ARG or ENV follows.
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
# gcc builds the one C module (accel_base/_guarded_copy.c: shared memory through a guarded
# mapping); where it cannot be built (no Python headers), pread/pwrite serve instead. The
# compiler stays in this stage. The base image's tag pins the release (DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY accel_base ./accel_base
COPY workers ./workers
COPY gateway ./gateway
COPY backends ./backends
COPY models ./models
COPY loadtests ./loadtests
# torch (in the torch, minilm, models and test extras) is pinned in pyproject; the PyTorch
# index has that release as a CPU-only build (a local version, 2.13.0+cpu, that pip prefers),
# without PyPI's gigabytes of CUDA libraries. The package names in EXTRA_PACKAGES are the
# builder's choice, pinned or not, hence DL3013 here.
# hadolint ignore=DL3013
RUN index=(); \
    case ",${EXTRAS}," in \
        *,torch,*|*,minilm,*|*,models,*|*,test,*) \
            if [ -n "${TORCH_INDEX_URL}" ]; then \
                index=(--extra-index-url "${TORCH_INDEX_URL}"); \
            fi ;; \
    esac; \
    python -m pip install --no-cache-dir "${index[@]}" ".${EXTRAS:+[${EXTRAS}]}"; \
    read -r -a extra <<< "${EXTRA_PACKAGES}"; \
    if [ "${#extra[@]}" -gt 0 ]; then \
        if [[ " ${EXTRA_PACKAGES} " == *" onnxruntime-"* ]]; then \
            python -m pip uninstall -y onnxruntime; \
        fi; \
        python -m pip install --no-cache-dir "${index[@]}" "${extra[@]}"; \
    fi; \
    accel-gateway --version

# ---- runtime: the venv, the system libraries the extras need, and an unprivileged user
FROM python AS runtime
ARG EXTRAS
ARG DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
LABEL org.opencontainers.image.title="accel-gateway" \
      org.opencontainers.image.description="KServe V2 / Triton-protocol inference gateway" \
      org.opencontainers.image.licenses="Apache-2.0"
# opencl runs tinygrad on OpenCL: PoCL is OpenCL on the CPU (a GPU's own driver is mounted by
# its container runtime). tvm links the libraries it compiles with the C compiler. The base
# image's tag pins the release these packages come from (DL3008).
# hadolint ignore=DL3008
RUN packages=(); \
    case ",${EXTRAS}," in \
        *,opencl,*|*,models,*|*,test,*) packages+=(ocl-icd-libopencl1 pocl-opencl-icd) ;; \
    esac; \
    case ",${EXTRAS}," in \
        *,tvm,*|*,models,*|*,test,*) packages+=(gcc libc6-dev) ;; \
    esac; \
    if [ "${#packages[@]}" -gt 0 ]; then \
        apt-get update; \
        apt-get install -y --no-install-recommends "${packages[@]}"; \
        rm -rf /var/lib/apt/lists/*; \
    fi
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --create-home --home-dir /home/gateway \
        --shell /usr/sbin/nologin gateway \
    && mkdir -p /models \
    && chown gateway:gateway /models
COPY --from=builder /opt/venv /opt/venv
COPY --chmod=0755 docker/entrypoint.sh /usr/local/bin/accel-gateway-entrypoint
# No MODEL_REPOSITORY here: the entrypoint's default differs between its modes.
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /home/gateway
VOLUME ["/models"]
# HTTP, gRPC, metrics; 8080 in SageMaker mode.
EXPOSE 8000 8001 8002 8080
# Asks the server's own HTTP port, over HTTPS when it serves TLS (gateway/operation/health_command.py).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["accel-gateway", "health"]
ENTRYPOINT ["/usr/local/bin/accel-gateway-entrypoint"]
CMD []
