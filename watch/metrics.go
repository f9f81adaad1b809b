package watch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cudatrace/cudatrace/tracer"
)

// Metrics are watch's Prometheus metrics, in a registry of their own (the
// client's global one would add the Go runtime's and any library's). The
// names are fixed: deploy/ and docs/watch.md use them.
type Metrics struct {
	reg       *prometheus.Registry
	build     *prometheus.GaugeVec
	starts    *prometheus.CounterVec
	diagnoses *prometheus.CounterVec
	refused   prometheus.Counter
	healthy   prometheus.Counter

	version string
	mu      sync.Mutex
	labels  [2]string // build_info's backend and syscall_hook now

	followed  atomic.Uint64
	following atomic.Int64
	dropped   atomic.Uint64
}

// NewMetrics registers the metrics; version labels cudatrace_build_info.
func NewMetrics(version string) *Metrics {
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		version: version,
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cudatrace_build_info",
			Help: "Always 1: the cudatrace version, its tracer backend and where its syscall programs run."},
			[]string{"version", "backend", "syscall_hook"}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cudatrace_cuda_starts_total",
			Help: "Processes whose first cuInit or nvmlInit returned, by result."}, []string{"result"}),
		diagnoses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cudatrace_diagnoses_total",
			Help: "Processes in which CUDA or a device call failed, by the primary finding and the container runtime."},
			[]string{"cause", "runtime"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "cudatrace_processes_refused_total",
			Help: "Processes not watched because the live-process cap (--max-processes) was reached."}),
		healthy: prometheus.NewCounter(prometheus.CounterOpts{Name: "cudatrace_processes_healthy_total",
			Help: "Watched processes that ended with nothing to diagnose."}),
	}
	for _, r := range []string{"success", "failure"} {
		m.starts.WithLabelValues(r) // both series exist from the start
	}
	m.reg.MustRegister(m.build, m.starts, m.diagnoses, m.refused, m.healthy,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cudatrace_processes_followed_total",
			Help: "Processes the backend has followed since the start."}, func() float64 { return float64(m.followed.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cudatrace_processes_following",
			Help: "Processes the backend follows now."}, func() float64 { return float64(m.following.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cudatrace_events_dropped_total",
			Help: "Events the backend lost (the kernel's ring buffer was full): diagnoses made meanwhile say incomplete."},
			func() float64 { return float64(m.dropped.Load()) }),
	)
	m.setBuild("", "")
	return m
}

func (m *Metrics) setBuild(backend, hook string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.labels == [2]string{backend, hook} && backend != "" {
		return
	}
	m.build.Reset()
	m.build.WithLabelValues(m.version, backend, hook).Set(1)
	m.labels = [2]string{backend, hook}
}

// live takes the backend's counters.
func (m *Metrics) live(backend string, s tracer.LiveStats) {
	m.atLeastFollowed(s.Followed)
	m.following.Store(int64(s.Following))
	if s.Dropped > m.dropped.Load() {
		m.dropped.Store(s.Dropped)
	}
	hook := s.SyscallHook
	if hook == "" {
		m.mu.Lock()
		hook = m.labels[1]
		m.mu.Unlock()
	}
	m.setBuild(backend, hook)
}

// atLeastFollowed raises the followed count to n: the backend's count is
// sampled, and every process the watch admitted, refused or filtered was
// followed by it, so the counter never ends below the diagnoses.
func (m *Metrics) atLeastFollowed(n uint64) {
	for {
		old := m.followed.Load()
		if n <= old || m.followed.CompareAndSwap(old, n) {
			return
		}
	}
}

// Backend names the backend in build_info before its first statistics.
func (m *Metrics) Backend(name string) { m.setBuild(name, "") }

func (m *Metrics) cudaStart(ok bool) {
	if ok {
		m.starts.WithLabelValues("success").Inc()
	} else {
		m.starts.WithLabelValues("failure").Inc()
	}
}

func (m *Metrics) diagnosis(cause, runtime string) { m.diagnoses.WithLabelValues(cause, runtime).Inc() }

// Handler serves the registry in the exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Listen binds addr (host:port; ":9400" for every address) before the
// watch starts, so an address in use is a clear error, not a log line
// later.
func Listen(addr string) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("--metrics %q: give HOST:PORT or :PORT", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, errors.Unwrap(err))
	}
	return ln, nil
}

// The metrics server's bounds. Anyone who can reach the port is a client,
// so what one can hold is capped: at most maxMetricsConns connections are
// accepted at once (more wait in the kernel's backlog, costing watch no
// fd), and each is cut off when it is slow to send its request, slow to
// read the answer, or idle. The diagnoses' own files (/proc, the report
// directory, the target's root) so never compete with a connection flood
// for fds: the server holds at most maxMetricsConns+1 of them.
const (
	maxMetricsConns     = 16
	metricsHeaderBytes  = 8 << 10
	metricsReadTimeout  = 5 * time.Second
	metricsWriteTimeout = 30 * time.Second
	metricsIdleTimeout  = 15 * time.Second
)

// Serve serves /metrics on ln until ctx is done; it returns the server's
// error, or nil after ctx.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: metricsReadTimeout,
		ReadTimeout:       metricsReadTimeout,
		WriteTimeout:      metricsWriteTimeout,
		IdleTimeout:       metricsIdleTimeout,
		MaxHeaderBytes:    metricsHeaderBytes,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(netutil.LimitListener(ln, maxMetricsConns)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // a stuck scraper is cut off at the timeout
		return nil
	}
}
