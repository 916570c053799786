package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// CompactEtcd compacts etcd's history up to its current revision, as
// kube-apiserver does every five minutes, only now: a watch that resumes
// from an older resource version and is not served from kube-apiserver's
// watch cache is told that its version expired (410 Gone) and relists. It
// returns the revision.
func (cp *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	var status struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// A range over one key reads the store's revision in its header.
	if err := cp.etcdCall(ctx, "/v3/kv/range", map[string]any{"key": "AA=="}, &status); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(status.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd's revision %q: %w", status.Header.Revision, err)
	}
	if err := cp.etcdCall(ctx, "/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, nil); err != nil {
		return 0, err
	}
	return rev, nil
}

// etcdCall posts a request to etcd's gRPC gateway (JSON over HTTP, which
// spares the suite an etcd client) and decodes the answer into out.
func (cp *ControlPlane) etcdCall(ctx context.Context, path string, in any, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	u := cp.env.ControlPlane.Etcd.URL.JoinPath(path)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	return nil
}

// DropClientConnections resets every client connection kube-apiserver
// holds (ss -K, as a load balancer or NAT in front of it losing its state
// would): the clients reconnect and resume their watches from the
// versions they saw last. It returns how many connections it reset.
func (cp *ControlPlane) DropClientConnections() (int, error) {
	u, err := url.Parse(cp.Config.Host)
	if err != nil {
		return 0, err
	}
	// ss prints each socket it destroyed; -K needs the kernel's
	// CONFIG_INET_DIAG_DESTROY.
	out, err := exec.Command("ss", "-K", "-H", "-t", "state", "established", "( sport = :"+u.Port()+" )").Output()
	if err != nil {
		return 0, fmt.Errorf("ss -K: %w", err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	if n == 0 {
		// ss skips what it cannot destroy (a kernel without
		// CONFIG_INET_DIAG_DESTROY) and still succeeds.
		return 0, fmt.Errorf("ss -K reset no connection to port %s", u.Port())
	}
	return n, nil
}
