package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	kubeprobe "k8s.io/kubernetes/pkg/probe"
	kubehttp "k8s.io/kubernetes/pkg/probe/http"
	kubetcp "k8s.io/kubernetes/pkg/probe/tcp"

	"github.com/swh-dev/swh/probes"
)

// probeTimeout is each probe's budget, as kubelet's default timeoutSeconds.
const probeTimeout = time.Second

// variant is one way of probing a server, measured against the others.
type variant struct {
	Name string
	Role string // "raw", "ours" or "kubelet"
	// New prepares the variant for the server at addr and returns one probe.
	New func(addr netip.AddrPort) (func() error, error)
}

// Row is the result of one variant.
type Row struct {
	Name     string
	Role     string
	Ops      int
	Median   sample
	TimeWait int // prober-side TIME_WAIT sockets to the variant's server afterwards
}

// Comparison is one side-by-side measurement.
type Comparison struct {
	Title  string
	Rounds int
	OpsPer int
	Rows   []Row
}

func tcpVariants() []variant {
	return []variant{
		// The floor as most code writes it: a close that sends a FIN
		// and leaves the socket in TIME_WAIT.
		{"raw net.Dialer connect+close", "raw", func(addr netip.AddrPort) (func() error, error) {
			return rawDial(addr, false), nil
		}},
		// The floor for the same work on the wire as our prober: a close
		// with a reset (SO_LINGER 0), no TIME_WAIT.
		{"raw net.Dialer connect+RST", "raw", func(addr netip.AddrPort) (func() error, error) {
			return rawDial(addr, true), nil
		}},
		{"swh probes.TCPProber", "ours", func(addr netip.AddrPort) (func() error, error) {
			p, err := probes.NewTCP(probes.TCPConfig{})
			if err != nil {
				return nil, err
			}
			t := probes.TargetFrom(addr)
			return func() error {
				return withTimeout(probeTimeout, func(ctx context.Context) error { return resultErr(p.Probe(ctx, t)) })
			}, nil
		}},
		{"kubelet pkg/probe/tcp", "kubelet", func(addr netip.AddrPort) (func() error, error) {
			p := kubetcp.New()
			host, port := addr.Addr().String(), int(addr.Port())
			return func() error { return kubeResultErr(p.Probe(host, port, probeTimeout)) }, nil
		}},
	}
}

func httpVariants() []variant {
	const path = "/healthz"
	return []variant{
		{"raw http.Client, no keep-alive", "raw", func(addr netip.AddrPort) (func() error, error) {
			client := &http.Client{
				Transport:     &http.Transport{DisableKeepAlives: true},
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}
			u := "http://" + addr.String() + path
			return func() error {
				return withTimeout(probeTimeout, func(ctx context.Context) error {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
					if err != nil {
						return err
					}
					resp, err := client.Do(req)
					if err != nil {
						return err
					}
					_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
					_ = resp.Body.Close()
					if resp.StatusCode < 200 || resp.StatusCode > 399 {
						return fmt.Errorf("HTTP %d", resp.StatusCode)
					}
					return nil
				})
			}, nil
		}},
		{"swh probes.HTTPProber", "ours", func(addr netip.AddrPort) (func() error, error) {
			p, err := probes.NewHTTP(probes.HTTPConfig{Path: path})
			if err != nil {
				return nil, err
			}
			t := probes.TargetFrom(addr)
			return func() error {
				return withTimeout(probeTimeout, func(ctx context.Context) error { return resultErr(p.Probe(ctx, t)) })
			}, nil
		}},
		{"kubelet pkg/probe/http", "kubelet", func(addr netip.AddrPort) (func() error, error) {
			p := kubehttp.New(false)
			u := &url.URL{Scheme: "http", Host: net.JoinHostPort(addr.Addr().String(), strconv.Itoa(int(addr.Port()))), Path: path}
			return func() error {
				// kubelet builds the request for every probe
				// (NewRequestForHTTPGetAction in prober.runProbe).
				req, err := kubehttp.NewProbeRequest(u, nil)
				if err != nil {
					return err
				}
				return kubeResultErr(p.Probe(req, probeTimeout))
			}, nil
		}},
	}
}

// rawDial is a net.Dialer connect-and-close loop; reset closes with a RST.
func rawDial(addr netip.AddrPort, reset bool) func() error {
	d := &net.Dialer{}
	a := addr.String()
	return func() error {
		return withTimeout(probeTimeout, func(ctx context.Context) error {
			c, err := d.DialContext(ctx, "tcp", a)
			if err != nil {
				return err
			}
			if reset {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
			return c.Close()
		})
	}
}

func resultErr(r probes.Result) error {
	if r.Passed() {
		return nil
	}
	return errors.New(r.String())
}

func kubeResultErr(r kubeprobe.Result, out string, err error) error {
	switch {
	case err != nil:
		return err
	case r != kubeprobe.Success:
		return fmt.Errorf("%s: %s", r, out)
	}
	return nil
}

// compare measures variants against servers of kind ("tcp", "http" or "grpc"), one
// server each, in rounds that interleave the variants so that a slow moment
// of the machine hits all of them alike; each figure is the median of the
// rounds. A short warm-up round comes first and is not counted.
func compare(title, kind string, variants []variant, rounds, ops int) (*Comparison, error) {
	srv, err := startChild(kind, len(variants), Loopback)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	probe := make([]func() error, len(variants))
	servers := make([]netip.AddrPort, len(variants))
	for i, v := range variants {
		if servers[i], err = netip.ParseAddrPort(srv.Addrs[i]); err != nil {
			return nil, err
		}
		if probe[i], err = v.New(servers[i]); err != nil {
			return nil, fmt.Errorf("%s: %w", v.Name, err)
		}
	}
	before := timeWaits()
	warmup := max(ops/10, 10)
	for i, v := range variants {
		if s := measure(warmup, probe[i]); s.Failures > 0 {
			return nil, fmt.Errorf("%s fails against %s: %v", v.Name, servers[i], probe[i]())
		}
	}
	samples := make([][]sample, len(variants))
	for range rounds {
		for i := range variants {
			samples[i] = append(samples[i], measure(ops, probe[i]))
		}
	}
	c := &Comparison{Title: title, Rounds: rounds, OpsPer: ops}
	for i, v := range variants {
		tw := newTimeWaits(before, map[netip.AddrPort]bool{servers[i]: true})
		c.Rows = append(c.Rows, Row{Name: v.Name, Role: v.Role, Ops: rounds*ops + warmup, Median: medianSample(samples[i]), TimeWait: tw})
	}
	return c, nil
}

// Row returns the row of role; for "raw", the cheapest raw variant by
// ns/op (the floor).
func (c *Comparison) Row(role string) Row {
	var best Row
	found := false
	for _, r := range c.Rows {
		if r.Role == role && (!found || r.Median.NsPerOp < best.Median.NsPerOp) {
			best, found = r, true
		}
	}
	return best
}

// withTimeout runs f with a context bounded by timeout, as a prober's caller
// (the scheduler, kubelet) gives each probe.
func withTimeout(timeout time.Duration, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return f(ctx)
}
