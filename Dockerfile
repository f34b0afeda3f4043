# Multi-stage build of both binaries. The runtime image runs as a non-root user and ships conf/.
#   docker build -t tollgate .
#   docker run --rm -p 8080:8080 -v $PWD/my.toml:/etc/tollgate/tollgate.toml tollgate
# Target `demo` adds the bundled mock supplier (compose.yaml's fleet); never for production.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bins -p tollgate -p mock-supplier

FROM debian:bookworm-slim AS base
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/tollgate --create-home tollgate
COPY --from=build /src/target/release/proxy /src/target/release/admin-api /usr/local/bin/
COPY conf/ /etc/tollgate/conf/
USER tollgate
WORKDIR /var/lib/tollgate
EXPOSE 8080 8081 9090
ENTRYPOINT ["/usr/local/bin/proxy"]
CMD ["--config", "/etc/tollgate/tollgate.toml"]

FROM base AS demo
COPY --from=build /src/target/release/mock-supplier /usr/local/bin/

# The default (last) stage: the production image, without the mock supplier.
FROM base AS runtime
