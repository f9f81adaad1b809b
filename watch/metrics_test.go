package watch

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// scrape fetches /metrics from m served on 127.0.0.1:0 with a real HTTP
// client and parses it with the Prometheus text parser, as a Prometheus
// server would read it.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- m.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4") // the text format, not protobuf
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s: %s", resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the text parser refused the scrape: %v", err)
	}
	return fams
}

// value is the sample of family name whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func counterValue(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := value(scrape(t, m), name, labels)
	if !ok {
		t.Fatalf("%s%v not exported", name, labels)
	}
	return v
}

func TestMetricsEndpoint(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{80: podCg, 82: "/", 83: "/", 84: podCg}}
	events := interleave(
		append(missingUVM(80, "a"), exitOf(80, 1)),
		append(deniedCtl(82, "b"), exitOf(82, 1)),
		append(healthyStart(83, "c"), exitOf(83, 0)),
		append(missingUVM(84, "d"), exitOf(84, 1)),
	)
	b := &fakeBackend{events: events, stats: map[int]tracer.LiveStats{
		2: {Dropped: 7, Following: 4, Followed: 4, SyscallHook: "fentry"},
	}, res: tracer.Result{Dropped: 9, SyscallHook: "fentry"}}
	m := NewMetrics("v1.2.3")
	watchWith(t, b, h, func(o *Options) { o.Metrics = m })
	fams := scrape(t, m)
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cudatrace_build_info", map[string]string{"version": "v1.2.3", "backend": "ebpf", "syscall_hook": "fentry"}, 1},
		{"cudatrace_cuda_starts_total", map[string]string{"result": "failure"}, 3},
		{"cudatrace_cuda_starts_total", map[string]string{"result": "success"}, 1},
		{"cudatrace_diagnoses_total", map[string]string{"cause": "node-missing", "runtime": "kubernetes"}, 2},
		{"cudatrace_diagnoses_total", map[string]string{"cause": "cgroup-denied-inferred", "runtime": ""}, 1},
		{"cudatrace_processes_followed_total", nil, 4},
		{"cudatrace_processes_following", nil, 0},  // all exited, the end's stats say 0
		{"cudatrace_events_dropped_total", nil, 9}, // the final Result's count
		{"cudatrace_processes_refused_total", nil, 0},
		{"cudatrace_processes_healthy_total", nil, 1},
	} {
		got, ok := value(fams, tt.name, tt.labels)
		if !ok || got != tt.want {
			t.Errorf("%s%v = %v (exported %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
	if n := len(fams["cudatrace_build_info"].GetMetric()); n != 1 {
		t.Errorf("%d build_info series, want 1 (the label set is replaced, not added to)", n)
	}
	for name := range fams {
		if !strings.HasPrefix(name, "cudatrace_") {
			t.Errorf("%s exported: the registry is not private", name)
		}
	}
}

func TestListenRefusesBadAddresses(t *testing.T) {
	privtest.Deadline(t)
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	for _, addr := range []string{"9400", "127.0.0.1", "http://x:1", ln.Addr().String()} {
		l2, err := Listen(addr)
		if err == nil {
			_ = l2.Close()
			t.Errorf("Listen(%q) accepted", addr)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "--metrics") || strings.Contains(msg, "\n") {
			t.Errorf("Listen(%q): %q, want one line naming --metrics", addr, msg)
		}
	}
}

// A CUDA start is counted once per process, from its first cuInit or
// nvmlInit return (the API event): repeats do not count again, a process
// that only opens nodes is no CUDA start, and -v prints the healthy one.
func TestCUDAStartsCountedOnce(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{90: "/", 91: "/", 92: "/"}}
	api := func(pid int, fn string, ret int64) tracer.Event {
		return tracer.Event{PID: pid, TID: pid, Comm: "python3", Kind: tracer.KindAPI, Func: fn, Path: "/usr/lib/libcuda.so.1", Ret: ret}
	}
	healthy := append(healthyStart(90, "python3"), api(90, "cuInit", 0), api(90, "nvmlInit_v2", 0), api(90, "cuInit", 0), exitOf(90, 0))
	opensOnly := []tracer.Event{
		{PID: 91, TID: 91, Comm: "nvidia-smi", Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: ctlDev},
		exitOf(91, 0),
	}
	// Its first start failed; a later cuInit that works is the same start.
	retried := append(missingUVM(92, "python3"), api(92, "cuInit", 0), exitOf(92, 1))
	m := NewMetrics("v-test")
	_, sum, out := watchWith(t, &fakeBackend{events: interleave(healthy, opensOnly, retried)}, h, func(o *Options) { o.Metrics = m; o.Verbose = true })
	if got := counterValue(t, m, "cudatrace_cuda_starts_total", map[string]string{"result": "success"}); got != 1 {
		t.Errorf("successful starts %v, want 1 (pid 90's four init returns count once)", got)
	}
	if got := counterValue(t, m, "cudatrace_cuda_starts_total", map[string]string{"result": "failure"}); got != 1 {
		t.Errorf("failed starts %v, want 1 (pid 92's first cuInit)", got)
	}
	lines := byPID(parseLines(t, out))
	if l := lines[90]; len(l) != 1 || l[0].Cause != "" || l[0].CUDA == nil || l[0].CUDA.Func != "cuInit" || l[0].CUDA.Code != 0 {
		t.Errorf("-v: pid 90's lines %+v, want one healthy line with cuInit 0", l)
	}
	if sum.Healthy != 2 || counterValue(t, m, "cudatrace_processes_healthy_total", nil) != 2 {
		t.Errorf("summary %+v: want 90 and 91 healthy", *sum)
	}
}

// countingListener counts the connections accepted from it and open now,
// and the most open at once.
type countingListener struct {
	net.Listener
	mu         sync.Mutex
	open, most int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.most = max(l.most, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.mu.Lock(); c.l.open--; c.l.mu.Unlock() })
	return c.Conn.Close()
}

// One local client opening many idle keep-alive connections gets at most
// maxMetricsConns of them accepted (each an fd of watch's); the rest wait
// in the kernel's backlog. Once it lets go, a scrape is served again.
func TestMetricsConnectionFlood(t *testing.T) {
	privtest.Deadline(t)
	inner, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: inner}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- NewMetrics("v").Serve(ctx, ln) }()
	const flood = 200
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	req := "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
	for range flood {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			break // the backlog is full: the kernel refuses, watch holds nothing
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, req) // then idle, the connection kept alive
	}
	// Each accepted connection is answered: read the answers of the first
	// maxMetricsConns, which proves the server reached its cap.
	for _, c := range conns[:maxMetricsConns] {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("an accepted connection was not answered: %v", err)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	ln.mu.Lock()
	most := ln.most
	ln.mu.Unlock()
	if most > maxMetricsConns {
		t.Errorf("%d connections accepted at once from %d idle clients, want at most %d", most, len(conns), maxMetricsConns)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Get("http://" + inner.Addr().String() + "/metrics")
	if err != nil {
		t.Fatalf("after the flood: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the flood: %s", resp.Status)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
