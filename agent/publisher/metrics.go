package publisher

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/swh-dev/swh/probes"
)

// Metrics are the agent's Prometheus metrics.
type Metrics struct {
	probeResults  *prometheus.CounterVec
	probeDuration *prometheus.HistogramVec
	transitions   prometheus.Counter
	sliceWrites   *prometheus.CounterVec
	liveReads     prometheus.Counter
	writeDelay    prometheus.Histogram
	targets       prometheus.Gauge
	secretReads   *prometheus.CounterVec
	gateWrites    *prometheus.CounterVec
	closings      *prometheus.CounterVec
	closed        prometheus.Counter
	held          *heldCollector
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		probeResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swh_agent_probe_results_total",
			Help: "Probe results by mode, status and reason.",
		}, []string{"mode", "status", "reason"}),
		probeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "swh_agent_probe_duration_seconds",
			Help:    "Duration of probes, connection and close included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"mode", "status"}),
		transitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swh_agent_target_transitions_total",
			Help: "Probe verdicts that flipped between passing and failing after their thresholds.",
		}),
		sliceWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swh_agent_slice_writes_total",
			Help: "EndpointSlice writes by operation and outcome.",
		}, []string{"operation", "outcome"}),
		liveReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swh_agent_live_slice_reads_total",
			Help: "Reads of the agent's slices from the API server because its cache lagged behind its own writes (a watch reconnecting).",
		}),
		writeDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swh_agent_verdict_to_write_seconds",
			Help:    "Delay from a verdict change to the slice write that publishes it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		targets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swh_agent_targets",
			Help: "Probe targets (probe x pod) running on this node.",
		}),
		secretReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swh_agent_secret_reads_total",
			Help: "Reads of database probes' credentials Secrets by outcome; after an error the last credentials read stay in use; over-bound: not kept (or not read), past the agent's bounds.",
		}, []string{"outcome"}),
		gateWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swh_agent_readiness_gate_writes_total",
			Help: "Writes of the readiness gate pod condition by the status written and outcome.",
		}, []string{"status", "outcome"}),
		closings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swh_agent_session_closings_total",
			Help: "Attempts to end the clients' sessions on a withdrawn PostgreSQL pod (closeSessions), by outcome.",
		}, []string{"outcome"}),
		closed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swh_agent_sessions_closed_total",
			Help: "Client sessions ended on withdrawn PostgreSQL pods (closeSessions).",
		}),
		held: newHeldCollector(),
	}
	for _, c := range []prometheus.Collector{m.probeResults, m.probeDuration, m.transitions, m.sliceWrites, m.liveReads, m.writeDelay, m.targets, m.secretReads, m.gateWrites, m.closings, m.closed, m.held} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the agent's metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) observeProbe(mode string, r probes.Result) {
	if m == nil {
		return
	}
	status := "failure"
	if r.Status == probes.Success {
		status = "success"
	}
	m.probeResults.WithLabelValues(mode, status, string(r.Reason)).Inc()
	m.probeDuration.WithLabelValues(mode, status).Observe(r.Latency.Seconds())
}

func (m *Metrics) transition() {
	if m != nil {
		m.transitions.Inc()
	}
}

func (m *Metrics) sliceWrite(op string, err error) {
	if m == nil {
		return
	}
	m.sliceWrites.WithLabelValues(op, writeOutcome(err)).Inc()
}

func (m *Metrics) liveSliceRead() {
	if m != nil {
		m.liveReads.Inc()
	}
}

// writeOutcome labels the answer to a write.
func writeOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsAlreadyExists(err):
		return "exists"
	case refused(err):
		return "forbidden"
	default:
		return "error"
	}
}

// gateWrite counts a patch of a pod's readiness gate condition to status.
func (m *Metrics) gateWrite(status string, err error) {
	if m != nil {
		m.gateWrites.WithLabelValues(status, writeOutcome(err)).Inc()
	}
}

// sessionsClosed counts an attempt to end the sessions on a pod, and the
// sessions it ended.
func (m *Metrics) sessionsClosed(n int, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.closings.WithLabelValues("error").Inc()
		return
	}
	m.closings.WithLabelValues("ok").Inc()
	m.closed.Add(float64(n))
}

func (m *Metrics) observeDelay(d time.Duration) {
	if m != nil {
		m.writeDelay.Observe(d.Seconds())
	}
}

func (m *Metrics) setTargets(n int) {
	if m != nil {
		m.targets.Set(float64(n))
	}
}

func (m *Metrics) secretRead(outcome string) {
	if m != nil {
		m.secretReads.WithLabelValues(outcome).Inc()
	}
}

// refused reports whether RBAC or an admission policy refused a write. A
// ValidatingAdmissionPolicy whose parameters are missing (the namespace's
// swh-services not written yet) answers 422 rather than 403.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || (apierrors.IsInvalid(err) && strings.Contains(err.Error(), "denied request"))
}

// heldCollector reports the fail-static gauges (failstatic.go), counted
// from the table when scraped: holds are rare, and counting at each change
// would miss the targets removed while held.
type heldCollector struct {
	held, suspected *prometheus.Desc
	table           atomic.Pointer[targetTable]
}

func newHeldCollector() *heldCollector {
	return &heldCollector{
		held: prometheus.NewDesc("swh_agent_held_targets",
			"Probe targets kept published as passing although they fail, because the failures point at the checker (fail static), by scope (probe: one probe of one resource; node: every probe of the node) and reason.",
			[]string{"scope", "reason"}, nil),
		suspected: prometheus.NewDesc("swh_agent_checker_suspected",
			"Scopes whose every target's latest result points at the checker rather than the pods: 1 for the node when every probe of the node gets no answer (timeout, unreachable; two pods at least), and per probe reason the number of probes of resources that fail the same way on every pod (config, secret, auth, tls).",
			[]string{"scope", "reason"}, nil),
	}
}

func (c *heldCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.suspected
}

func (c *heldCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.table.Load()
	if t == nil {
		return
	}
	for desc, counts := range map[*prometheus.Desc]map[[2]string]int{c.held: t.heldCounts(), c.suspected: t.suspected()} {
		for k, n := range counts {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), k[0], k[1])
		}
	}
}

// watchTable makes the metrics read the holds of t.
func (m *Metrics) watchTable(t *targetTable) {
	if m != nil {
		m.held.table.Store(t)
	}
}
