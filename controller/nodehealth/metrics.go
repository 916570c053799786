package nodehealth

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics say what the Withdrawer sees and does.
type Metrics struct {
	notReady  prometheus.Gauge
	withdrawn prometheus.Counter
	delay     prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		notReady: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swh_controller_nodes_not_ready",
			Help: "Nodes whose Ready condition is Unknown or False: their endpoints are withdrawn.",
		}),
		withdrawn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swh_controller_endpoints_withdrawn_total",
			Help: "Endpoints the controller marked not serving because their node is not Ready.",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swh_controller_node_withdrawal_delay_seconds",
			Help:    "From a node's Ready condition changing (its lastTransitionTime, whole seconds) to the controller's first write withdrawing its endpoints in that not-Ready period.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60},
		}),
	}
	for _, c := range []prometheus.Collector{m.notReady, m.withdrawn, m.delay} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the node health metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) setNotReady(n int) {
	if m != nil {
		m.notReady.Set(float64(n))
	}
}

// withdrew counts a slice's withdrawn endpoints.
func (m *Metrics) withdrew(endpoints int) {
	if m != nil {
		m.withdrawn.Add(float64(endpoints))
	}
}

// observeDelay observes the delay since the node's condition changed, once
// per not-Ready period of a node.
func (m *Metrics) observeDelay(since time.Time) {
	if m != nil {
		m.delay.Observe(time.Since(since).Seconds())
	}
}
