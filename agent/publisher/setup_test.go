package publisher

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/swh-dev/swh/probes"
)

// TestNewValidates: New refuses what would fail later (a nil client, a
// negative duration) and says every problem at once; defaults apply to
// zero values.
func TestNewValidates(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	deps := Deps{Client: c, APIReader: c, Recorder: &events.FakeRecorder{}}
	tests := []struct {
		name string
		node string
		opts Options
		deps Deps
		want []string // parts of the error; none: no error
	}{
		{"defaults", testNode, Options{}, deps, nil},
		{"no node", "", Options{}, deps, []string{"node name is required"}},
		{"no clients", testNode, Options{}, Deps{Recorder: deps.Recorder}, []string{"Deps.Client is required", "Deps.APIReader is required"}},
		{"no recorder", testNode, Options{}, Deps{Client: c, APIReader: c}, []string{"Deps.Recorder is required"}},
		{"negative durations", testNode, Options{Coalesce: -time.Second, SecretTTL: -time.Second}, deps,
			[]string{"Options.Coalesce -1s is negative", "Options.SecretTTL -1s is negative"}},
		{"negative concurrency", testNode, Options{MaxConcurrentProbes: -1}, deps, []string{"Options.MaxConcurrentProbes -1 is negative"}},
		{"negative namespace concurrency", testNode, Options{MaxConcurrentProbesPerNamespace: -1}, deps, []string{"Options.MaxConcurrentProbesPerNamespace -1 is negative"}},
		{"namespace concurrency over the total", testNode, Options{MaxConcurrentProbes: 10, MaxConcurrentProbesPerNamespace: 11}, deps,
			[]string{"Options.MaxConcurrentProbesPerNamespace 11 exceeds Options.MaxConcurrentProbes (10)"}},
		{"negative Secret bounds", testNode, Options{SecretCacheBytes: -1, SecretCacheNamespaceBytes: -2}, deps,
			[]string{"Options.SecretCacheBytes -1 is negative", "Options.SecretCacheNamespaceBytes -2 is negative"}},
		{"a namespace's Secret bound over the total", testNode, Options{SecretCacheBytes: 1 << 20}, deps,
			[]string{"Options.SecretCacheNamespaceBytes 8388608 exceeds Options.SecretCacheBytes 1048576"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.node, tt.opts, tt.deps)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				bounds := p.probers.secrets.usage.bounds
				if bounds.Total != DefaultSecretCacheBytes || bounds.Namespace != DefaultSecretCacheNamespaceBytes {
					t.Errorf("Secret bounds %+v, want the defaults", bounds)
				}
				if p.verdictFlips.delay != 30*time.Millisecond || p.probers.userAgent == "" || p.scheduler == nil {
					t.Errorf("defaults not applied: coalesce %v, user agent %q", p.verdictFlips.delay, p.probers.userAgent)
				}
				return
			}
			if err == nil {
				t.Fatal("New accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestSchedulerOptions: the probes of one namespace are bounded to a share
// of the node's probe slots, a quarter unless set, never zero.
func TestSchedulerOptions(t *testing.T) {
	for _, tt := range []struct {
		opts                    Options
		wantTotal, wantPerGroup int
	}{
		{Options{}, probes.DefaultMaxConcurrent, probes.DefaultMaxConcurrent / 4},
		{Options{MaxConcurrentProbes: 100}, 100, 25},
		{Options{MaxConcurrentProbes: 3}, 3, 1},
		{Options{MaxConcurrentProbes: 100, MaxConcurrentProbesPerNamespace: 100}, 100, 100},
		{Options{MaxConcurrentProbesPerNamespace: 10}, probes.DefaultMaxConcurrent, 10},
	} {
		got, err := schedulerOptions(tt.opts)
		if err != nil {
			t.Errorf("%+v: %v", tt.opts, err)
			continue
		}
		if got.MaxConcurrent != tt.wantTotal || got.MaxConcurrentPerGroup != tt.wantPerGroup || !got.NoJitter {
			t.Errorf("%+v: MaxConcurrent %d, MaxConcurrentPerGroup %d, NoJitter %v; want %d, %d, true",
				tt.opts, got.MaxConcurrent, got.MaxConcurrentPerGroup, got.NoJitter, tt.wantTotal, tt.wantPerGroup)
		}
	}
}
