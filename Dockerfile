# Builds a static cudatrace. The generated eBPF objects are committed, so
# no clang is needed. `make image` runs this build with VERSION from git.
#
#   docker build --build-arg VERSION="$(git describe --always --dirty)" -t cudatrace .
#
# .dockerignore leaves .git out of the context, so the version comes from
# VERSION rather than from go's VCS stamp.
#
# To trace host processes: --pid=host and the capabilities in
# deploy/kubernetes/README.md (or --privileged), e.g.
#   docker run --rm --pid=host --cap-drop=ALL --cap-add=BPF --cap-add=PERFMON \
#     --cap-add=SYS_ADMIN --cap-add=NET_ADMIN --cap-add=SYS_PTRACE \
#     --cap-add=DAC_READ_SEARCH --cap-add=SYSLOG \
#     --security-opt apparmor=unconfined cudatrace watch --format json
# Fully qualified: podman, unlike docker, resolves no short names by default.
FROM docker.io/library/golang:1.26 AS build
ARG VERSION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /cudatrace ./cmd/cudatrace \
 && /cudatrace version
# The image's own accounts. `-u USER -- CMD` resolves USER in the image's
# /etc/passwd and /etc/group, as CMD runs in the image's file system:
# root and nobody are here; for the host's users by name, mount the host's
# files over these (-v /etc/passwd:/etc/passwd:ro -v /etc/group:/etc/group:ro);
# UID:GID needs no entry. `doctor --pid PID -u USER` reads PID's own
# /etc/passwd, and watch each target's, inside their roots, not these.
# Launching with -u also needs CAP_SETUID and CAP_SETGID (watch does not).
# /tmp is for a read-only root file system with nothing mounted on /tmp.
RUN mkdir -p /rootfs/etc /rootfs/tmp \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >/rootfs/etc/passwd \
 && printf 'root:x:0:\nnobody:x:65534:\n' >/rootfs/etc/group \
 && chmod 0644 /rootfs/etc/passwd /rootfs/etc/group && chmod 1777 /rootfs/tmp

FROM scratch
ARG VERSION=unknown
LABEL org.opencontainers.image.title="cudatrace" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/cudatrace/cudatrace"
COPY --from=build /rootfs/ /
COPY --from=build /cudatrace /cudatrace
ENTRYPOINT ["/cudatrace"]
