# moekit on NVIDIA's JAX + MaxText image, which ships JAX, Transformer Engine and MaxText; moekit adds
# only its own code and the few packages the image lacks. The blog's results need maxtext-2026-09-10 or
# newer: pass a newer tag, or pin a digest for reproducible builds:
#   docker build --build-arg BASE_IMAGE=ghcr.io/nvidia/jax:maxtext-2026-09-10 -t moekit .
#   docker build --build-arg BASE_IMAGE=ghcr.io/nvidia/jax@sha256:<digest> -t moekit .
# No `# syntax=` line and no heredocs here: both break builds on older engines (Docker 20.10).
ARG BASE_IMAGE=ghcr.io/nvidia/jax:maxtext-2026-09-09
FROM ${BASE_IMAGE}

ARG BASE_IMAGE
ARG MOEKIT_VERSION=0.1.0
ARG MOEKIT_SOURCE=""
ARG MOEKIT_REVISION=""
LABEL org.opencontainers.image.title="moekit" \
      org.opencontainers.image.description="Dropless MoE training with JAX, Transformer Engine and MaxText" \
      org.opencontainers.image.version="${MOEKIT_VERSION}" \
      org.opencontainers.image.source="${MOEKIT_SOURCE}" \
      org.opencontainers.image.revision="${MOEKIT_REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /opt/moekit
COPY pyproject.toml README.md ./
COPY src ./src
# Every package the base already has is pinned at its installed version, so pip adds moekit and what it
# lacks (Hydra, ...) but never replaces the base's JAX, Transformer Engine or MaxText. The base installs
# into its system Python, which Ubuntu marks externally managed (PEP 668); so does moekit.
RUN python3 -m pip list --format=freeze > /tmp/base-packages.txt \
 && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --root-user-action=ignore -c /tmp/base-packages.txt /opt/moekit \
 && rm -rf /opt/moekit/src /opt/moekit/build /tmp/base-packages.txt

COPY conf ./conf
COPY entrypoints ./entrypoints
ENV MOEKIT_CONF_DIR=/opt/moekit/conf
# Run directories go to /workspace/outputs/<experiment>/<timestamp>: mount a volume there.
WORKDIR /workspace
ENTRYPOINT ["/opt/moekit/entrypoints/moekit-entrypoint"]
CMD ["--help"]
