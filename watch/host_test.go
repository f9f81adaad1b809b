package watch

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// Host refuses a configuration it cannot carry out with a *ConfigError
// (the command's usage error), before any backend is chosen.
func TestHostConfigErrors(t *testing.T) {
	ctx := privtest.Deadline(t)
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Close() }()
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"report dir a file", Config{ReportDir: file, ReportKeep: 1}, "not a directory"},
		{"report keep 0", Config{ReportDir: t.TempDir()}, "--report-keep 0"},
		{"metrics unparsable", Config{Metrics: "9400"}, "give HOST:PORT or :PORT"},
		{"metrics in use", Config{Metrics: busy.Addr().String()}, "address already in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &fakeBackend{}
			tc.c.backend = b
			_, err := Host(ctx, tc.c)
			if _, ok := errors.AsType[*ConfigError](err); !ok || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Host: %v, want a one-line *ConfigError saying %q", err, tc.want)
			}
			if b.spec.HostWide {
				t.Error("the backend ran")
			}
		})
	}
}

// Host builds the watch from the Config: the NVIDIA majors from
// ProcDevicesPath and DeviceMajors, folding, the duration, ring buffer and
// debug settings in the backend's spec, the report directory and the
// metrics server, then runs.
func TestHostBuildsTheWatch(t *testing.T) {
	ctx := privtest.Deadline(t)
	dir := t.TempDir()
	pd := filepath.Join(dir, "devices")
	if err := os.WriteFile(pd, []byte("Character devices:\n  1 mem\n238 nvidia-uvm\n\nBlock devices:\n  8 sd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var held *watcher
	b := &fakeBackend{
		events: []tracer.Event{exitOf(99, 0)},
		before: func(_ int, w *watcher) { held = w },
	}
	sum, err := Host(ctx, Config{
		ProcDevicesPath: pd, DeviceMajors: []uint{240}, Duration: time.Hour, RingBufferBytes: 1 << 16,
		Debug: true, ReportDir: dir, ReportKeep: 3, Metrics: "127.0.0.1:0", Version: "test",
		backend: b, // Notice nil: Host gives the watch a no-op one
	})
	if err != nil || sum == nil {
		t.Fatalf("Host: %v", err)
	}
	s := b.spec
	if !s.HostWide || !slices.Equal(s.DeviceMajors, []uint32{195, 238, 240}) || s.FoldIoctlsAfter == 0 || s.FoldCallsAfter == 0 {
		t.Errorf("spec: host-wide %v, majors %v, fold after %d/%d: want host-wide, 195 238 240, folding",
			s.HostWide, s.DeviceMajors, s.FoldIoctlsAfter, s.FoldCallsAfter)
	}
	if s.Duration != time.Hour || s.RingBufferBytes != 1<<16 || !s.Debug {
		t.Errorf("spec: duration %v, ring buffer %d, debug %v", s.Duration, s.RingBufferBytes, s.Debug)
	}
	if held == nil {
		t.Fatal("the backend delivered no event")
	}
	if o := held.o; o.ReportDir == nil || o.ReportDir.keep != 3 || o.Metrics == nil || o.Debug == nil || o.ProcDevicesPath != pd || o.Version != "test" {
		t.Errorf("options: report dir %v, metrics %v, debug set %v, proc devices %q, version %q",
			o.ReportDir, o.Metrics != nil, o.Debug != nil, o.ProcDevicesPath, o.Version)
	}
}
