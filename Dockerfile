# syntax=docker/dockerfile:1
# The dra-extender image: `docker build -t dra-extender:0.1.0 .` from the repository root.
#
# Stage 1 builds a wheel of the package and installs it, with its runtime dependencies only (no dev
# or plot extras), into a virtual environment; stage 2 copies that environment onto a clean base
# and runs it as an unprivileged user. The base is pinned by version; pin it by digest too
# (python:3.11.13-slim-bookworm@sha256:...) for byte-for-byte reproducible builds.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/dra-extender
# The runtime dependencies, exactly as [project.dependencies] in pyproject.toml lists them
# (tests/deploy checks that the two lists agree; uvloop's platform marker always holds here). Installed before the source is copied, so that
# a code change does not re-download them.
RUN /opt/dra-extender/bin/pip install \
        "cel-python==0.5.0" \
        "lark>=1.1,<2" \
        "google-re2>=1.1" \
        "pyyaml>=6.0" \
        "orjson>=3.9" \
        "aiohttp>=3.9" \
        "structlog>=24.1" \
        "prometheus-client>=0.20" \
        "kubernetes-asyncio>=30.1,<37" \
        "httptools>=0.6" \
        "greenlet>=3.0" \
        "uvloop>=0.19"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY extender ./extender
# No extras: pip resolves the wheel's own requirements, which the layer above already satisfied.
RUN /opt/dra-extender/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/dra-extender/bin/pip install /wheels/dra_extender-*.whl \
    && /opt/dra-extender/bin/pip check

FROM ${PYTHON_IMAGE}
# A fixed UID/GID (65532, the usual "nonroot"), so that runAsUser in the pod spec matches it.
RUN groupadd --system --gid 65532 dra-extender \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin dra-extender
COPY --from=build /opt/dra-extender /opt/dra-extender
# The demo cluster, to try the image without a cluster:
#   docker run --rm -p 8888:8888 dra-extender:0.1.0 serve --cluster /usr/share/dra-extender/demo-cluster.yaml --listen 0.0.0.0:8888
COPY deploy/examples/demo-cluster.yaml /usr/share/dra-extender/demo-cluster.yaml
ENV PATH=/opt/dra-extender/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DRA_EXTENDER_LOG_FORMAT=json
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["dra-extender"]
# Loopback by default, as the sidecar of kube-scheduler (deploy/base/deployment.yaml passes the
# same). Inside a pod the Kubernetes backend uses the in-cluster configuration.
CMD ["serve", "--listen", "127.0.0.1:8888"]
