package probes_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/swh-dev/swh/probes"
)

// loopbackListener stands for the server being probed.
func loopbackListener() (net.Listener, probes.Target) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	return l, probes.TargetFrom(l.Addr().(*net.TCPAddr).AddrPort())
}

func ExampleTCPProber() {
	l, target := loopbackListener()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	p, err := probes.NewTCP(probes.TCPConfig{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res := p.Probe(ctx, target)
	fmt.Println(res.Status, res.Reason, res.Message)

	l.Close()
	res = p.Probe(ctx, target)
	fmt.Println(res.Status, res.Reason)
	// Output:
	// success ok connected
	// failure refused
}

func ExampleHTTPProber() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, "warming up", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	target := probes.TargetFrom(netip.MustParseAddrPort(srv.Listener.Addr().String()))

	for _, path := range []string{"/healthz", "/ready"} {
		p, err := probes.NewHTTP(probes.HTTPConfig{
			Path:                path,
			Host:                "app.example.test", // the Host header (and the TLS name with https)
			Headers:             []probes.Header{{Name: "X-Probe", Value: "1"}},
			ExpectedStatusCodes: []string{"200-299"},
		})
		if err != nil {
			panic(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res := p.Probe(ctx, target)
		cancel()
		fmt.Printf("%s: %s (%s) %s\n", path, res.Status, res.Reason, res.Message)
	}
	// Output:
	// /healthz: success (ok) HTTP 204 No Content
	// /ready: failure (http-status) HTTP 503 Service Unavailable, expected 200-299: warming up
}

func ExampleParseStatusCodes() {
	codes, err := probes.ParseStatusCodes("200-299", "304,401")
	if err != nil {
		panic(err)
	}
	fmt.Println(codes, codes.Contains(204), codes.Contains(302), codes.Contains(401))
	fmt.Println(probes.DefaultStatusCodes())

	_, err = probes.ParseStatusCodes("399-200")
	fmt.Println(err)
	// Output:
	// 200-299,304,401 true false true
	// 200-399
	// probes: status codes "399-200": range 399-200 is not written low-high
}

func ExampleTracker() {
	tr, err := probes.NewTracker(probes.TrackerConfig{SuccessThreshold: 1, FailureThreshold: 3})
	if err != nil {
		panic(err)
	}
	for _, s := range []probes.Status{probes.Success, probes.Failure, probes.Failure, probes.Success, probes.Failure, probes.Failure, probes.Failure} {
		healthy, changed := tr.Observe(s)
		if changed {
			fmt.Printf("%s: now healthy=%v\n", s, healthy)
		}
	}
	// Output:
	// success: now healthy=true
	// failure: now healthy=false
}

func ExampleScheduler() {
	l, target := loopbackListener()
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tcp, _ := probes.NewTCP(probes.TCPConfig{})

	// One tracker per key; OnResult is never called concurrently for one
	// key, so the tracker needs no lock of its own.
	type key struct{ pod, port string }
	trackers := map[key]*probes.Tracker{}
	results := make(chan string)
	s, err := probes.NewScheduler(probes.SchedulerOptions[key]{
		OnResult: func(r probes.Report[key]) {
			healthy, changed := trackers[r.Key].Observe(r.Result.Status)
			results <- fmt.Sprintf("%s/%s: %s (%s), healthy=%v changed=%v", r.Key.pod, r.Key.port, r.Result.Status, r.Result.Reason, healthy, changed)
		},
		MaxConcurrent: 100,
		// One tenant whose probes hang holds 25 slots at most; the
		// others' probes keep running on time in the other 75.
		MaxConcurrentPerGroup: 25,
	})
	if err != nil {
		panic(err)
	}
	k := key{"web-0", "http"}
	trackers[k], _ = probes.NewTracker(probes.TrackerConfig{})
	job := probes.Job{Prober: tcp, Target: target, Period: 20 * time.Millisecond, Timeout: time.Second, Group: "tenant-a"}
	if err := s.Add(k, job); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	for range 3 {
		fmt.Println(<-results)
	}
	cancel()
	go func() { // a result may be on its way while Run stops
		for range results {
		}
	}()
	<-done
	close(results)
	// Output:
	// web-0/http: success (ok), healthy=true changed=true
	// web-0/http: success (ok), healthy=true changed=false
	// web-0/http: success (ok), healthy=true changed=false
}
