package probes

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks probe loopback servers. The raw ones are the floors the
// probers are compared with: the same work with the standard library and
// nothing else. (The comparison with kubelet's probers lives in the test
// module, to keep Kubernetes out of this module's go.mod.)

// reportCPU measures the CPU per op of loop, as cpu-user-µs/op and
// cpu-sys-µs/op (on loopback, the system time includes the kernel's work
// for the server side of the connection).
func reportCPU(b *testing.B, loop func()) {
	u0, s0 := cpuTime()
	loop()
	u1, s1 := cpuTime()
	n := float64(b.N)
	b.ReportMetric(float64((u1-u0).Microseconds())/n, "cpu-user-µs/op")
	b.ReportMetric(float64((s1-s0).Microseconds())/n, "cpu-sys-µs/op")
}

// The TCP benchmarks connect to a server in another process, so that the
// CPU they report is the client's.
func BenchmarkTCPProbe(b *testing.B) {
	target := startAcceptor(b)
	p, _ := NewTCP(TCPConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	reportCPU(b, func() {
		for b.Loop() {
			if res := p.Probe(ctx, target); !res.Passed() {
				b.Fatal(res)
			}
		}
	})
}

// BenchmarkTCPRawDial is the floor: net.Dialer connect and close, as most
// code does it (leaving TIME_WAIT sockets; tcp_tw_reuse lets loopback cope).
func BenchmarkTCPRawDial(b *testing.B) {
	target := startAcceptor(b)
	addr := target.Addr()
	var d net.Dialer
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	reportCPU(b, func() {
		for b.Loop() {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}

func httpServer(b *testing.B) Target {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	}))
	srv.Listener.Close()
	srv.Listener = listen(b, "tcp4", "127.0.0.1")
	srv.Start()
	b.Cleanup(srv.Close)
	return targetOf(b, srv.Listener)
}

func BenchmarkHTTPProbe(b *testing.B) {
	target := httpServer(b)
	p, _ := NewHTTP(HTTPConfig{Path: "/healthz"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if res := p.Probe(ctx, target); !res.Passed() {
			b.Fatal(res)
		}
	}
}

// BenchmarkHTTPRawClient is the floor: an http.Client without keep-alive
// getting the same URL and reading the body.
func BenchmarkHTTPRawClient(b *testing.B) {
	target := httpServer(b)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	url := "http://" + target.Addr() + "/healthz"
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = resp.Body.Read(make([]byte, 64))
		resp.Body.Close()
	}
}

// runSchedulerBench runs keys at a period so short that every key is always
// due: it measures what the scheduler adds to each probe (heap, context,
// goroutine, semaphore, callback) at full throughput. One op is one
// delivered result.
func runSchedulerBench(b *testing.B, keys int, prober Prober) {
	var delivered atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	s, _ := NewScheduler(SchedulerOptions[int]{OnResult: func(Report[int]) {
		if delivered.Add(1) == n {
			close(done)
		}
	}})
	for k := range keys {
		if err := s.Add(k, Job{Prober: prober, Target: Target{Host: "127.0.0.1", Port: 1}, Period: time.Microsecond, Timeout: time.Second}); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		defer close(stopped)
		_ = s.Run(ctx)
	}()
	<-done
	b.StopTimer()
	cancel()
	<-stopped
}

func BenchmarkSchedulerOverhead(b *testing.B) {
	noop := ProberFunc(func(context.Context, Target) Result { return Result{Status: Success, Reason: ReasonOK} })
	runSchedulerBench(b, 10000, noop)
}

// BenchmarkSchedulerTCP drives TCP probes of 10,000 keys to one loopback
// listener (in another process) through the scheduler, as fast as it goes.
func BenchmarkSchedulerTCP(b *testing.B) {
	target := startAcceptor(b)
	tcp, _ := NewTCP(TCPConfig{})
	runSchedulerBench(b, 10000, ProberFunc(func(ctx context.Context, _ Target) Result {
		return tcp.Probe(ctx, target)
	}))
}

// BenchmarkSchedulerKeys measures the memory a scheduled key costs.
func BenchmarkSchedulerKeys(b *testing.B) {
	const keys = 10000
	noop := ProberFunc(func(context.Context, Target) Result { return Result{} })
	job := Job{Prober: noop, Target: Target{Host: "127.0.0.1", Port: 1}, Period: time.Second}
	var before, after runtime.MemStats
	var bytes int64
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		s, _ := NewScheduler(SchedulerOptions[int]{OnResult: func(Report[int]) {}})
		for k := range keys {
			_ = s.Add(k, job)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		bytes += int64(after.HeapAlloc) - int64(before.HeapAlloc)
		runtime.KeepAlive(s)
	}
	b.ReportMetric(float64(bytes)/float64(b.N)/keys, "B/key")
}

// BenchmarkScheduler10k runs 10,000 keys at a 1 s period, the load the agent
// must carry; one op is one second of it. It reports the CPU the process
// used per second (cores, server side included for TCP), the probes
// delivered and the scheduling lag (Started - Scheduled).
func BenchmarkScheduler10k(b *testing.B) {
	noop := ProberFunc(func(context.Context, Target) Result { return Result{Status: Success, Reason: ReasonOK} })
	b.Run("noop", func(b *testing.B) { runScheduler10k(b, noop) })
	b.Run("tcp", func(b *testing.B) {
		target := startAcceptor(b) // in another process: its CPU is not the prober's
		tcp, _ := NewTCP(TCPConfig{})
		runScheduler10k(b, ProberFunc(func(ctx context.Context, _ Target) Result { return tcp.Probe(ctx, target) }))
	})
}

func runScheduler10k(b *testing.B, prober Prober) {
	const keys = 10000
	var (
		mu     sync.Mutex
		lags   []time.Duration
		failed int
	)
	s, _ := NewScheduler(SchedulerOptions[int]{OnResult: func(r Report[int]) {
		mu.Lock()
		defer mu.Unlock()
		lags = append(lags, r.Started.Sub(r.Scheduled))
		if !r.Result.Passed() {
			failed++
		}
	}})
	for k := range keys {
		_ = s.Add(k, Job{Prober: prober, Target: Target{Host: "127.0.0.1", Port: 1}, Period: time.Second})
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = s.Run(ctx)
	}()
	time.Sleep(time.Second) // the first, jittered round
	mu.Lock()
	lags = lags[:0]
	mu.Unlock()

	cpu := func() time.Duration {
		user, sys := cpuTime()
		return user + sys
	}
	b.ResetTimer()
	cpu0, t0 := cpu(), time.Now()
	for b.Loop() {
		time.Sleep(time.Second)
	}
	used, elapsed := cpu()-cpu0, time.Since(t0)
	b.StopTimer()
	cancel()
	<-stopped

	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lags)
	pct := func(p float64) float64 {
		if len(lags) == 0 {
			return 0
		}
		return float64(lags[int(p*float64(len(lags)-1))].Microseconds())
	}
	b.ReportMetric(used.Seconds()/elapsed.Seconds(), "cores")
	b.ReportMetric(float64(len(lags))/elapsed.Seconds(), "probes/s")
	b.ReportMetric(pct(0.5), "lag-p50-µs")
	b.ReportMetric(pct(0.99), "lag-p99-µs")
	b.ReportMetric(float64(failed), "failures")
}
