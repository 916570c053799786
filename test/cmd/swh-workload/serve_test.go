package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFailFor: POST /fail?for=AGENT fails the health checks of that prober
// only; clients and other probers are answered as before, and /recover
// ends it.
func TestFailFor(t *testing.T) {
	srv := httptest.NewServer(&backend{pod: "web-0", port: "8080"})
	defer srv.Close()
	do := func(method, path, agent string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", agent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	do(http.MethodPost, "/fail?for=swh-probe", "test")
	for _, tc := range []struct {
		path, agent string
		status      int
		body        string
	}{
		{"/healthz", "swh-probe/0.1.0", http.StatusServiceUnavailable, "failing"},
		{"/healthz", "kube-probe/1.35", http.StatusOK, "ok"},
		{"/", "Go-http-client/1.1", http.StatusOK, "web-0"},
	} {
		if status, body := do(http.MethodGet, tc.path, tc.agent); status != tc.status || body != tc.body {
			t.Errorf("GET %s as %s while failing for swh-probe: %d %q, want %d %q", tc.path, tc.agent, status, body, tc.status, tc.body)
		}
	}
	do(http.MethodPost, "/recover", "test")
	if status, _ := do(http.MethodGet, "/healthz", "swh-probe/0.1.0"); status != http.StatusOK {
		t.Errorf("after /recover the swh-probe check answers %d", status)
	}
}
