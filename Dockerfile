# capcard in a container, for `capcard k8s` (its manifests run `capcard` by
# name, as a non-root user whose group owns the results volume).
#
#   docker build -t capcard .

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# --locked: the dependency versions of Cargo.lock, as tested.
RUN cargo build --release --locked --bin capcard

FROM debian:bookworm-slim
# CA roots for endpoints served over HTTPS (rustls-platform-verifier reads the
# system store).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# Numeric uid and gid, fixed: Kubernetes' runAsNonRoot can only verify a
# numeric user, and the manifests' fsGroup (10001) is this group.
RUN groupadd --system --gid 10001 capcard \
    && useradd --system --uid 10001 --gid capcard --home-dir /work --create-home capcard
COPY --from=build /src/target/release/capcard /usr/local/bin/capcard
USER 10001:10001
WORKDIR /work
ENTRYPOINT ["capcard"]
