package deploy_test

import (
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	agentapp "github.com/swh-dev/swh/agent/app"
	"github.com/swh-dev/swh/agent/publisher"
	controllerapp "github.com/swh-dev/swh/controller/app"
)

// standardMetrics are the series the binaries export through
// controller-runtime and client-go, and Prometheus' own up. controller-runtime
// registers them at init in its process-wide registry, not through the
// Registerer the binaries pass, so they cannot be recorded like swh's own:
// this short list stands in for them, and holds only names that
// docs/operations.md lists (TestMonitoringMetricsExist checks it).
var standardMetrics = []string{
	"up",
	"leader_election_master_status",
	"controller_runtime_reconcile_total",
	"controller_runtime_reconcile_errors_total",
	"controller_runtime_reconcile_time_seconds_bucket",
	"controller_runtime_reconcile_time_seconds_sum",
	"controller_runtime_reconcile_time_seconds_count",
	"workqueue_depth",
	"rest_client_requests_total",
}

// recordingRegistry is the Registry a binary's manager gets: it keeps the
// fully qualified name of every series a registered collector describes,
// as Prometheus would see them (a histogram's _bucket, _sum and _count).
type recordingRegistry struct {
	*prometheus.Registry
	mu    sync.Mutex
	names map[string]bool
}

func newRecordingRegistry() *recordingRegistry {
	return &recordingRegistry{Registry: prometheus.NewRegistry(), names: map[string]bool{}}
}

// fqName reads the name out of a Desc, which has no accessor for it.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recordingRegistry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	var suffixes []string
	switch c.(type) {
	case *prometheus.SummaryVec:
		suffixes = []string{"", "_sum", "_count"}
	case *prometheus.HistogramVec:
		suffixes = []string{"_bucket", "_sum", "_count"}
	case prometheus.Histogram:
		// The Summary interface has the same methods: ask the metric.
		suffixes = []string{"", "_sum", "_count"}
		if isHistogram(c.(prometheus.Metric)) {
			suffixes = []string{"_bucket", "_sum", "_count"}
		}
	default:
		suffixes = []string{""}
	}
	descs := make(chan *prometheus.Desc)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		for _, s := range suffixes {
			r.names[m[1]+s] = true
		}
	}
	return nil
}

func (r *recordingRegistry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// binaryMetrics returns every series name swh-controller and swh-agent
// export: their own metrics, recorded from the managers the binaries build
// (app.NewManager, not started), and the standard ones.
func binaryMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ctrlReg, agentReg := newRecordingRegistry(), newRecordingRegistry()
	// A webhook port registers the eviction guard's metrics; the manager
	// never starts, so nothing listens on it.
	if _, err := controllerapp.NewManager(controlPlane.Config, controllerapp.Options{
		MetricsAddr: "0", HealthAddr: "0", Registry: ctrlReg, SkipNameValidation: true,
		WebhookPort: 9443, WebhookCertDir: t.TempDir(),
	}); err != nil {
		t.Fatalf("building the controller: %v", err)
	}
	if _, err := agentapp.NewManager(controlPlane.Config, agentapp.Options{
		NodeName: "metric-names", MetricsAddr: "0", HealthAddr: "0", Registry: agentReg,
		Publisher: publisher.Options{SkipNameValidation: true},
	}); err != nil {
		t.Fatalf("building the agent: %v", err)
	}
	names := map[string]bool{}
	for _, reg := range []*recordingRegistry{ctrlReg, agentReg} {
		for n := range reg.names {
			names[n] = true
		}
	}
	// A recorder that saw nothing would make every check below vacuous.
	for _, want := range []string{"swh_controller_resource_endpoints", "swh_controller_evictions_total", "swh_agent_probe_results_total", "swh_agent_verdict_to_write_seconds_bucket"} {
		if !names[want] {
			t.Fatalf("the binaries' metrics lack %s; recorded: %s", want, strings.Join(sortedKeys(names), " "))
		}
	}
	for _, n := range standardMetrics {
		names[n] = true
	}
	return names
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var (
	promqlStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// label_values(metric, label): the label is no metric.
	labelValuesArg = regexp.MustCompile(`(label_values\s*\([^,()]*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)`)
	promqlToken    = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promqlKeywords = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true,
	}
)

// promqlMetrics returns the metric names a PromQL expression (or a Grafana
// label_values query) selects: identifiers that are not functions,
// keywords, label names, numbers or durations. No PromQL parser is in the
// module's dependencies; TestPromQLMetrics pins this one down.
func promqlMetrics(expr string) []string {
	expr = promqlStrings.ReplaceAllString(expr, `""`)
	expr = promqlMatchers.ReplaceAllString(expr, "")
	expr = promqlRanges.ReplaceAllString(expr, "")
	expr = promqlGrouping.ReplaceAllString(expr, "")
	expr = labelValuesArg.ReplaceAllString(expr, "$1)")
	var out []string
	for _, m := range promqlToken.FindAllStringSubmatch(expr, -1) {
		tok := m[0]
		if m[1] != "" || promqlKeywords[tok] || tok[0] >= '0' && tok[0] <= '9' {
			continue // a function call, a keyword, a number
		}
		out = append(out, tok)
	}
	return out
}

func TestPromQLMetrics(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job=~".*swh.*agent.*"} == 0`, []string{"up"}},
		{`absent(up{job=~".*swh.*controller.*"} == 1)`, []string{"up"}},
		{`(sum(leader_election_master_status{name="swh-controller"}) or vector(0)) < 1`, []string{"leader_election_master_status"}},
		{"sum by (instance, mode) (rate(a_total{status=\"failure\"}[10m]))\n  / sum by (instance, mode) (rate(a_total[10m])) > 0.5", []string{"a_total", "a_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(b_bucket[$__rate_interval]))) > 5`, []string{"b_bucket"}},
		{`max by (namespace, name, port) (c{state="total", namespace=~"$namespace"}) offset 5m`, []string{"c"}},
		{`sum(x) > 1e3 unless on (a) y`, []string{"x", "y"}},
		{`label_values(swh_controller_resource_endpoints, namespace)`, []string{"swh_controller_resource_endpoints"}},
	} {
		if got := promqlMetrics(tc.expr); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("promqlMetrics(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// isHistogram reports whether a metric writes histogram data.
func isHistogram(m prometheus.Metric) bool {
	var out dto.Metric
	return m.Write(&out) == nil && out.Histogram != nil
}
