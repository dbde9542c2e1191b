# The HTTP gateway (examples/gateway) as a container image: docs/deploy.md says how to build and run it.
#
#   docker build -t ember-gateway .                      the gateway; mount the model at /models
#   docker build -t ember-gateway:smollm2 --target bundled .   the same with SmolLM2-135M inside (98 MB more)
#
# Stages: `build` compiles libember (Rust) and links it statically into the gateway (Go); `model` fetches the default
# model the way `make model` does; `runtime` is Debian slim with the one binary and a non-root user. Checked offline
# by tests/docker/check_dockerfile.py (make lint): this project's machines run no Docker engine.

FROM golang:1.23-bookworm AS go

FROM rust:1.95-bookworm AS build
COPY --from=go /usr/local/go /usr/local/go
ENV PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local CGO_ENABLED=1
WORKDIR /src
COPY . .
# The gateway links target/release/libember.a (bindings/go/link_static.go), as `make gateway` does.
RUN cargo build --release --lib \
 && cd examples/gateway \
 && go build -trimpath -o /out/ember-gateway .

FROM python:3.11-slim-bookworm AS model
WORKDIR /src
COPY scripts/fetch-model.sh scripts/fetch-model.sh
RUN scripts/fetch-model.sh && mkdir /models && mv models/*.gguf /models/

FROM debian:bookworm-slim AS runtime
RUN useradd --system --uid 10001 --no-create-home ember && mkdir /models
COPY --from=build /out/ember-gateway /usr/local/bin/ember-gateway
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

FROM runtime AS bundled
COPY --from=model /models/ /models/
