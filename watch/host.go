package watch

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cudatrace/cudatrace/diagnose"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// Config is a watch of this host as the command line asks for it. Host
// builds the rest from it: the report directory, the metrics server, the
// NVIDIA part of the backend's spec and the eBPF backend.
type Config struct {
	Filter       Filter
	Verbose      bool      // also print the processes in which nothing failed
	JSON         bool      // JSON lines; otherwise one readable line each
	Out          io.Writer // diagnosis lines
	MaxProcesses int       // 0: DefaultMaxProcesses
	Duration     time.Duration
	// Debug: the backend's diagnostics (the verifier log), and a Notice
	// for each process as it is followed.
	Debug bool
	// ReportDir, when set, keeps each diagnosis's full report there, the
	// newest ReportKeep of them.
	ReportDir  string
	ReportKeep int
	// Metrics, when set, is the address (HOST:PORT or :PORT) to serve
	// Prometheus metrics on at /metrics.
	Metrics string
	// ProcDevicesPath is where device majors are read; DeviceMajors are
	// more to count as NVIDIA's (testing).
	ProcDevicesPath string
	DeviceMajors    []uint
	RingBufferBytes int // 0: the backend's default
	Version         string
	// Notice gets one-line notes for the operator; Ready is called once,
	// when the host is watched (Options.Ready).
	Notice func(msg string)
	Ready  func(tracer.LiveStats)

	backend tracer.Backend // tests; nil: the eBPF backend
}

// ConfigError is a Config that cannot be carried out as given: a report
// directory that takes no reports, a metrics address that is unparsable
// or in use. Nothing was watched.
type ConfigError struct{ err error }

func (e *ConfigError) Error() string { return e.err.Error() }
func (e *ConfigError) Unwrap() error { return e.err }

// Host watches this host as c asks until ctx is done or c.Duration
// passes (Run). Before the watch it opens the report directory, binds the
// metrics address and serves it (a server that fails stops the watch,
// with a Notice), fills the NVIDIA part of the spec and chooses the eBPF
// backend. A *ConfigError is the configuration's fault; another error is
// the host's (no eBPF) or the watch's.
func Host(ctx context.Context, c Config) (*Summary, error) {
	notice := c.Notice
	if notice == nil {
		notice = func(string) {}
	}
	o := Options{
		ProcDevicesPath: c.ProcDevicesPath, Version: c.Version, Filter: c.Filter,
		Verbose: c.Verbose, JSON: c.JSON, Out: c.Out, MaxProcesses: c.MaxProcesses,
		Notice: notice, Ready: c.Ready,
		Host: snapshot.NodeName(), // the node, not the pod, when run as a DaemonSet
	}
	if c.Debug {
		o.Debug = notice
	}
	if c.ReportDir != "" {
		rd, err := OpenReportDir(c.ReportDir, c.ReportKeep)
		if err != nil {
			return nil, &ConfigError{err}
		}
		o.ReportDir = rd
	}
	// The metrics server ends with the watch or fails on its own, which
	// ends the watch.
	ctx, cancel := context.WithCancel(ctx)
	var monitor sync.WaitGroup
	defer monitor.Wait() // no Notice after Host returns
	defer cancel()
	if c.Metrics != "" {
		ln, err := Listen(c.Metrics)
		if err != nil {
			return nil, &ConfigError{err}
		}
		o.Metrics = NewMetrics(c.Version)
		serveDone := make(chan error, 1)
		go func() { serveDone <- o.Metrics.Serve(ctx, ln) }()
		monitor.Go(func() {
			select {
			case err := <-serveDone:
				if err != nil {
					notice(fmt.Sprintf("metrics server: %v; stopping", err))
					cancel()
				}
			case <-ctx.Done():
			}
		})
	}
	if err := diagnose.NVIDIASpec(&o.Spec, c.ProcDevicesPath, c.DeviceMajors, true); err != nil {
		return nil, err
	}
	o.Spec.Duration = c.Duration
	o.Spec.Debug = c.Debug
	o.Spec.RingBufferBytes = c.RingBufferBytes
	o.Backend = c.backend
	if o.Backend == nil {
		backend, err := diagnose.ChooseBackend("ebpf", nil)
		if err != nil {
			return nil, fmt.Errorf("host-wide tracing needs eBPF: %w", err)
		}
		o.Backend = backend
	}
	return Run(ctx, o)
}
