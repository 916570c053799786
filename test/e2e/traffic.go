package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/swh-dev/swh/test/harness/netns"
)

// Request sends one request and returns the pod it landed on ("" when it
// reached none) and whether it failed.
type Request func(ctx context.Context) (pod string, err error)

// requestTimeout bounds one request: generous, since the machine is shared
// and a slow answer is not a lost one; Tally counts the slow ones.
const requestTimeout = 5 * time.Second

// slow is how long a request may take before Tally calls it slow.
const slow = time.Second

// HTTPGet requests url from ns, on a new connection each time, so every
// request is balanced anew by kube-proxy. A 503 still names its pod.
func HTTPGet(ns *netns.Namespace, url string) Request { return HTTPGetWithin(ns, url, requestTimeout) }

// HTTPGetWithin is HTTPGet with a timeout of its own, shorter for requests
// meant to reach nothing.
func HTTPGetWithin(ns *netns.Namespace, url string, timeout time.Duration) Request {
	client := &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{DialContext: ns.DialContext, DisableKeepAlives: true},
	}
	return func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		pod := strings.TrimSpace(string(body))
		if err != nil {
			return pod, err
		}
		if resp.StatusCode != http.StatusOK {
			return pod, fmt.Errorf("status %d from %s", resp.StatusCode, pod)
		}
		return pod, nil
	}
}

// Banner connects from ns to addr and reads the "220 <pod>" greeting.
func Banner(ns *netns.Namespace, addr string) Request {
	return func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		conn, err := ns.DialContext(ctx, "tcp", addr)
		if err != nil {
			return "", err
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(requestTimeout))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("reading the greeting: %w", err)
		}
		pod, ok := strings.CutPrefix(strings.TrimSpace(line), "220 ")
		if !ok {
			return "", fmt.Errorf("unexpected greeting %q", line)
		}
		return pod, nil
	}
}

// nsDialer lets lib/pq connect from inside a namespace.
type nsDialer struct{ ns *netns.Namespace }

func (d nsDialer) Dial(network, addr string) (net.Conn, error) {
	return d.ns.DialContext(context.Background(), network, addr)
}

func (d nsDialer) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.ns.DialContext(ctx, network, addr)
}

func (d nsDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.ns.DialContext(ctx, network, addr)
}

// PostgresServer connects from ns with dsn, on a new connection each time,
// and asks the server for its address; podOf names the pod.
func PostgresServer(ns *netns.Namespace, dsn string, podOf func(ip string) string) Request {
	return func(ctx context.Context) (string, error) {
		connector, err := pq.NewConnector(dsn)
		if err != nil {
			return "", err
		}
		connector.Dialer(nsDialer{ns})
		db := sql.OpenDB(connector)
		defer func() { _ = db.Close() }()
		ctx, cancel := context.WithTimeout(ctx, 2*requestTimeout)
		defer cancel()
		var ip string
		if err := db.QueryRowContext(ctx, "SELECT host(inet_server_addr())").Scan(&ip); err != nil {
			return "", err
		}
		return podOf(ip), nil
	}
}

// Tally counts where requests landed.
type Tally struct {
	Total, Failed int
	// Slow counts the successful requests that took over a second.
	Slow int
	// Landed counts successful requests per pod.
	Landed map[string]int
	// Errors holds the first few failures.
	Errors []string
}

func (t *Tally) add(pod string, err error, took time.Duration) {
	if t.Landed == nil {
		t.Landed = map[string]int{}
	}
	t.Total++
	if err == nil && took > slow {
		t.Slow++
	}
	if err != nil {
		t.Failed++
		if len(t.Errors) < 5 {
			t.Errors = append(t.Errors, err.Error())
		}
		return
	}
	t.Landed[pod]++
}

// Merge adds o's counts to t.
func (t *Tally) Merge(o Tally) {
	if t.Landed == nil {
		t.Landed = map[string]int{}
	}
	t.Total += o.Total
	t.Failed += o.Failed
	t.Slow += o.Slow
	for k, v := range o.Landed {
		t.Landed[k] += v
	}
	for _, e := range o.Errors {
		if len(t.Errors) < 5 {
			t.Errors = append(t.Errors, e)
		}
	}
}

// String lists the landings sorted by pod.
func (t Tally) String() string {
	pods := make([]string, 0, len(t.Landed))
	for p := range t.Landed {
		pods = append(pods, p)
	}
	sort.Strings(pods)
	var parts []string
	for _, p := range pods {
		parts = append(parts, fmt.Sprintf("%s=%d", p, t.Landed[p]))
	}
	s := fmt.Sprintf("%d/%d failed; landed %s", t.Failed, t.Total, strings.Join(parts, " "))
	if t.Slow > 0 {
		s += fmt.Sprintf("; %d slow (over %s)", t.Slow, slow)
	}
	if len(t.Errors) > 0 {
		s += fmt.Sprintf("; errors: %q", t.Errors)
	}
	return s
}

// LandsOnly reports whether every request succeeded, landed only on want,
// and reached each of want at least once.
func (t Tally) LandsOnly(want ...string) bool {
	if t.Failed > 0 || t.Total == 0 {
		return false
	}
	allowed := map[string]bool{}
	for _, w := range want {
		allowed[w] = true
		if t.Landed[w] == 0 {
			return false
		}
	}
	for p := range t.Landed {
		if !allowed[p] {
			return false
		}
	}
	return true
}

// Send sends n requests, four at a time.
func Send(ctx context.Context, req Request, n int) Tally {
	var mu sync.Mutex
	var t Tally
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				start := time.Now()
				pod, err := req(ctx)
				took := time.Since(start)
				mu.Lock()
				t.add(pod, err, took)
				mu.Unlock()
			}
		}()
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	return t
}

// Loop sends requests one after another until stopped: a client that
// must see no failure while something changes.
type Loop struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	tally  Tally
}

// StartLoop starts sending req in a loop.
func StartLoop(ctx context.Context, req Request) *Loop {
	ctx, cancel := context.WithCancel(ctx)
	l := &Loop{cancel: cancel, done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(l.done)
		for ctx.Err() == nil {
			sent := time.Now()
			pod, err := req(ctx)
			took := time.Since(sent)
			if ctx.Err() != nil {
				return // cut short by Stop: not the data path's failure
			}
			if err != nil {
				err = fmt.Errorf("at +%s: %w", time.Since(start).Round(time.Millisecond), err)
			}
			l.mu.Lock()
			l.tally.add(pod, err, took)
			l.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return l
}

// Snapshot returns the counts so far.
func (l *Loop) Snapshot() Tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t Tally
	t.Merge(l.tally)
	return t
}

// Stop ends the loop and returns its counts.
func (l *Loop) Stop() Tally {
	l.cancel()
	<-l.done
	return l.Snapshot()
}
