# The HTTP gateway (examples/gateway) and ember-cli as a container image: docs/deploy.md says how to build and run it.
#
#   docker build -t ember-gateway:0.1.0 .                        the runtime image (the last stage, so the default)
#   docker build -t ember-gateway:0.1.0-smollm2 --target bundled .   the same with SmolLM2-135M inside (98 MB more)
#
# The model comes in one of three ways: `ember-cli pull NAME` into the Hugging Face cache under $HF_HOME (a volume at
# /models; Kubernetes runs it as an init container, deploy/kubernetes/), then the gateway with `--model NAME` and
# HF_HUB_OFFLINE=1, which resolves NAME from that cache; a GGUF file mounted at /models; or the `bundled` stage.
#
# Stages: `build` compiles libember (Rust) and links it statically into the gateway (Go), and builds ember-cli;
# `model` fetches the default model the way `make model` does; `base` is Debian slim with the two binaries, CA
# certificates (the hub client's HTTPS) and a non-root user; `bundled` adds the model; `runtime` is `base` as it is,
# last so that a plain `docker build .` makes it. Checked offline by tests/docker/check_dockerfile.py (make lint):
# this project's machines run no Docker engine.

FROM golang:1.23-bookworm AS go

FROM rust:1.95-bookworm AS build
COPY --from=go /usr/local/go /usr/local/go
ENV PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local CGO_ENABLED=1
WORKDIR /src
COPY . .
# The gateway links target/release/libember.a (-tags ember_in_repo: bindings/go/link_in_repo_static.go), as
# `make gateway` does; without the tag the binding would look for an installed library through pkg-config.
RUN cargo build --release --lib --bin ember-cli \
 && mkdir -p /out && cp target/release/ember-cli /out/ember-cli \
 && cd examples/gateway \
 && go build -tags ember_in_repo -trimpath -o /out/ember-gateway .

FROM python:3.11-slim-bookworm AS model
WORKDIR /src
COPY scripts/fetch-model.sh scripts/fetch-model.sh
RUN scripts/fetch-model.sh && mkdir /models && mv models/*.gguf /models/

FROM debian:bookworm-slim AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home ember \
 && mkdir /models && chown 10001 /models
COPY --from=build /out/ember-gateway /usr/local/bin/ember-gateway
COPY --from=build /out/ember-cli /usr/local/bin/ember-cli
# The hub cache (`ember-cli pull`, and `--model NAME` in the gateway) on the model volume: a new Docker volume
# mounted at /models takes the directory's owner, so user 10001 can fill it.
ENV HF_HOME=/models/hf
USER 10001
EXPOSE 8080
# Slim images have no curl: the gateway probes itself (`--health-probe`: exit 0 when /health answers 200, which it
# stops doing once SIGTERM has started the drain).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
  CMD ["/usr/local/bin/ember-gateway", "--health-probe", "http://127.0.0.1:8080/health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/ember-gateway"]
CMD ["--listen", "0.0.0.0:8080", "--model", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", \
     "--enable-per-request-metrics", "--shutdown-timeout", "25s"]

FROM base AS bundled
COPY --from=model /models/ /models/

FROM base AS runtime
