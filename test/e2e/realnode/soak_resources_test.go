package realnode_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// resourceSample is one reading of a process's metrics.
type resourceSample struct {
	at                   time.Time
	goroutines, fds, rss float64
	leader               bool
}

// resourceUsage holds the readings of every agent and controller process
// (a pod's container instance: its UID and restart count) over the run.
type resourceUsage struct {
	samples map[string][]resourceSample // "component pod#restarts"
	errors  int
	// firstErrors are the first few failed readings.
	firstErrors []string
	// clientErr: no client to read them with.
	clientErr error
}

// Growth limits of a process between its second reading (after start-up)
// and its last three (settled), for processes read 4 times over 2 minutes
// at least.
const (
	growthGoroutines = 30  // plus 50%
	growthFDs        = 20  // plus 50%
	growthRSS        = 2.0 // times
)

type resourceSampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	usage  resourceUsage
}

// sampleResources reads the agents' and the controllers' metrics every
// 15 s through the API server's pod proxy.
func sampleResources(ctx context.Context) *resourceSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &resourceSampler{cancel: cancel, done: make(chan struct{}), usage: resourceUsage{samples: map[string][]resourceSample{}}}
	cs, err := kubernetes.NewForConfig(cluster.CP.Config)
	s.usage.clientErr = err
	go func() {
		defer close(s.done)
		for {
			if err == nil {
				s.sample(ctx, cs)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(15 * time.Second):
			}
		}
	}()
	return s
}

func (s *resourceSampler) sample(ctx context.Context, cs kubernetes.Interface) {
	for _, component := range []string{"agent", "controller"} {
		pods, err := chartPods(ctx, component)
		if err != nil {
			s.mu.Lock()
			s.usage.errors++
			s.mu.Unlock()
			continue
		}
		for _, p := range pods {
			if !podReady(&p) {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			raw, err := cs.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, containerPort(p, "metrics"), "/metrics", nil).DoRaw(rctx)
			cancel()
			s.mu.Lock()
			if err != nil {
				s.usage.errors++
				if len(s.usage.firstErrors) < 3 {
					s.usage.firstErrors = append(s.usage.firstErrors, fmt.Sprintf("%s: %v", p.Name, err))
				}
			} else {
				r := parseResources(raw)
				// A standby controller that takes the lead starts its
				// controllers: a new series, not growth.
				key := fmt.Sprintf("%s %s#%d", component, p.Name, restarts(p))
				if r.leader {
					key += " (leader)"
				}
				s.usage.samples[key] = append(s.usage.samples[key], r)
			}
			s.mu.Unlock()
		}
	}
}

func containerPort(p corev1.Pod, name string) string {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name {
				return strconv.Itoa(int(port.ContainerPort))
			}
		}
	}
	return "8080"
}

// parseResources reads go_goroutines, process_open_fds and
// process_resident_memory_bytes from a Prometheus text exposition.
func parseResources(raw []byte) resourceSample {
	r := resourceSample{at: time.Now()}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			r.goroutines = v
		case "process_open_fds":
			r.fds = v
		case "process_resident_memory_bytes":
			r.rss = v
		}
		if strings.HasPrefix(name, "leader_election_master_status{") && v == 1 {
			r.leader = true
		}
	}
	return r
}

func (s *resourceSampler) stop() resourceUsage {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// judged lists the processes read long enough to judge their growth.
func (u resourceUsage) judged() []string {
	var keys []string
	for k, ss := range u.samples {
		if len(ss) >= 4 && ss[len(ss)-1].at.Sub(ss[1].at) >= 2*time.Minute {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// violations: growth of any process judged; and, when requireJudged, no
// process judged at all (a short run whose faults restarted every series,
// an agent upgrade and a leader kill late in it, judges none).
func (u resourceUsage) violations(requireJudged bool) []string {
	var out []string
	if u.clientErr != nil {
		out = append(out, "no client to read the metrics: "+u.clientErr.Error())
	}
	if requireJudged && len(u.judged()) == 0 {
		out = append(out, fmt.Sprintf("no process was read 4 times over 2 minutes (%d processes, %d failed readings: %q)", len(u.samples), u.errors, u.firstErrors))
	}
	for _, k := range u.judged() {
		ss := u.samples[k]
		first, last := ss[1], settled(ss)
		if last.goroutines > first.goroutines*1.5+growthGoroutines {
			out = append(out, fmt.Sprintf("%s: goroutines %v → %v", k, first.goroutines, last.goroutines))
		}
		if last.fds > first.fds*1.5+growthFDs {
			out = append(out, fmt.Sprintf("%s: open files %v → %v", k, first.fds, last.fds))
		}
		if last.rss > first.rss*growthRSS {
			out = append(out, fmt.Sprintf("%s: RSS %.0f → %.0f MiB", k, first.rss/(1<<20), last.rss/(1<<20)))
		}
	}
	return out
}

// settled is where a process ended up: the least of each figure over its
// last three readings. A fault under way at the last reading (connections
// to an API server that is restarting, their goroutines) passes; a leak
// stays in all three.
func settled(ss []resourceSample) resourceSample {
	last := ss[len(ss)-1]
	for _, x := range ss[max(len(ss)-3, 1):] {
		last.goroutines = min(last.goroutines, x.goroutines)
		last.fds = min(last.fds, x.fds)
		last.rss = min(last.rss, x.rss)
	}
	return last
}

// String: per process judged, its readings from the second to the last.
func (u resourceUsage) String() string {
	var b strings.Builder
	judged := u.judged()
	fmt.Fprintf(&b, "processes read every 15 s: %d (%d judged, read 4 times over 2 minutes or more), %d failed readings\n", len(u.samples), len(judged), u.errors)
	for _, k := range judged {
		ss := u.samples[k]
		first, last := ss[1], settled(ss)
		fmt.Fprintf(&b, "  %s over %s: goroutines %.0f → %.0f, open files %.0f → %.0f, RSS %.1f → %.1f MiB\n", k, last.at.Sub(first.at).Round(time.Second),
			first.goroutines, last.goroutines, first.fds, last.fds, first.rss/(1<<20), last.rss/(1<<20))
	}
	return b.String()
}
