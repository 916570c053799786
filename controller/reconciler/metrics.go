package reconciler

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what the reconciler writes. Reconcile outcomes and
// durations come from controller-runtime's own controller metrics.
type Metrics struct {
	serviceWrites *prometheus.CounterVec
	statusWrites  *prometheus.CounterVec
	slicesDeleted prometheus.Counter
	reverts       *prometheus.CounterVec
}

// NewMetrics creates the counters and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		serviceWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swh_controller_service_writes_total",
			Help: "Writes of child Services (apply, adoption and drift patches) by result: ok, error, forbidden.",
		}, []string{"result"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swh_controller_status_writes_total",
			Help: "Writes of ServiceWithHealthchecks status by result.",
		}, []string{"result"}),
		slicesDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swh_controller_slices_collected_total",
			Help: "EndpointSlices deleted: agent slices of gone nodes, ports or families, and built-in slices of adopted Services or of a removed selector.",
		}),
		reverts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swh_controller_service_reverts_total",
			Help: "Fields of child Services that someone else changed and the controller put back, by field.",
		}, []string{"field"}),
	}
	for _, c := range []prometheus.Collector{m.serviceWrites, m.statusWrites, m.slicesDeleted, m.reverts} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the controller's metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) serviceWrite(result string) {
	if m != nil {
		m.serviceWrites.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) statusWrite(result string) {
	if m != nil {
		m.statusWrites.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) sliceCollected() {
	if m != nil {
		m.slicesDeleted.Inc()
	}
}

func (m *Metrics) reverted(fields []string) {
	if m != nil {
		for _, f := range fields {
			m.reverts.WithLabelValues(f).Inc()
		}
	}
}
