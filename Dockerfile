# Builds a static cudatrace. The generated eBPF objects are committed, so
# no clang is needed. Run the result with --privileged (or CAP_BPF,
# CAP_PERFMON, CAP_SYS_ADMIN) and --pid=host to trace host processes.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /cudatrace ./cmd/cudatrace

FROM scratch
COPY --from=build /cudatrace /cudatrace
ENTRYPOINT ["/cudatrace"]
