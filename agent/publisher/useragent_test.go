package publisher

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
)

// TestHTTPProbeUserAgent: the agent's HTTP probes send the agent's
// User-Agent (swh-probe/<agent version>, Options.UserAgent) to a real
// server, not the probes module's default; a User-Agent among the probe's
// headers still wins.
func TestHTTPProbeUserAgent(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("User-Agent")
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	target := probes.TargetFrom(netip.MustParseAddrPort(u.Host))

	tests := []struct {
		name    string
		headers []swhv1alpha1.HTTPHeader
		want    string
	}{
		{"the agent's", nil, "swh-probe/v9.8.7"},
		{"the probe's header", []swhv1alpha1.HTTPHeader{{Name: "User-Agent", Value: "custom/1"}}, "custom/1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newProberFactory(nil)
			f.userAgent = "swh-probe/v9.8.7"
			pr := f.build("ns", testOwner, &swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeHTTP, HTTP: &swhv1alpha1.HTTPProbe{
				TargetPort: intstr.FromInt32(int32(target.Port)), Path: "/", HTTPHeaders: tt.headers,
			}})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if res := pr.Probe(ctx, target); res.Status != probes.Success {
				t.Fatalf("probe: %+v", res)
			}
			if ua := <-got; ua != tt.want {
				t.Errorf("User-Agent %q, want %q", ua, tt.want)
			}
		})
	}
}
