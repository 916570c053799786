package disruption

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics say what the guard decides and how fast.
type Metrics struct {
	decisions *prometheus.CounterVec
	duration  prometheus.Histogram
	conflicts prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swh_controller_evictions_total",
			Help: "Evictions the guard answered, by decision: allowed (a budget allowed it), ignored (no budget covers the pod, or it is not running), denied (HTTP 429), error (could not decide; also 429).",
		}, []string{"decision"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swh_controller_eviction_decision_seconds",
			Help:    "Time to answer one eviction, reads and reservation write included.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swh_controller_eviction_reservation_conflicts_total",
			Help: "Reservation writes that lost a race (the resource changed since it was read) and were decided again.",
		}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.duration, m.conflicts} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the eviction guard metrics: %w", err)
		}
	}
	for _, o := range []outcome{outcomeAllowed, outcomeIgnored, outcomeDenied, outcomeError} {
		m.decisions.WithLabelValues(string(o))
	}
	return m, nil
}

func (m *Metrics) observe(o outcome, d time.Duration) {
	if m != nil {
		m.decisions.WithLabelValues(string(o)).Inc()
		m.duration.Observe(d.Seconds())
	}
}

func (m *Metrics) conflict(isConflict bool) {
	if m != nil && isConflict {
		m.conflicts.Inc()
	}
}
