# One small static image carrying both operators:
#   /gamedeployment-operator   (default entrypoint)
#   /hook-operator
# Build:  docker build -t <registry>/gamedeployment-operators:<tag> .
# The Helm chart selects the binary with `command:`. This file is not exercised by the tests (no Docker engine
# runs where they do); the binaries it builds are the same ones the tests run.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools cmake clang \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# The `dist` profile (Cargo.toml): the release profile with fat LTO over one codegen unit, for less resident code.
RUN cargo build --profile dist --locked --target x86_64-unknown-linux-musl \
        -p gamedeployment-operator -p hook-operator \
    && cp target/x86_64-unknown-linux-musl/dist/gamedeployment-operator /gamedeployment-operator \
    && cp target/x86_64-unknown-linux-musl/dist/hook-operator /hook-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /gamedeployment-operator /gamedeployment-operator
COPY --from=build /hook-operator /hook-operator
USER 65532:65532
ENTRYPOINT ["/gamedeployment-operator"]
