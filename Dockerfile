# Builds a static cudatrace. The generated eBPF objects are committed, so
# no clang is needed. Run the result with --privileged (or CAP_BPF,
# CAP_PERFMON, CAP_SYS_ADMIN) and --pid=host to trace host processes.
#
#   docker build --build-arg VERSION="$(git describe --always --dirty)" -t cudatrace .
#
# .dockerignore leaves .git out of the context, so the version comes from
# VERSION rather than from go's VCS stamp.
FROM golang:1.26 AS build
ARG VERSION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /cudatrace ./cmd/cudatrace \
 && /cudatrace version

# No /etc/passwd here: -u nobody is the kernel's overflow uid, and
# -u UID:GID needs no lookup.
FROM scratch
ARG VERSION=unknown
LABEL org.opencontainers.image.title="cudatrace" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/cudatrace/cudatrace"
COPY --from=build /cudatrace /cudatrace
ENTRYPOINT ["/cudatrace"]
