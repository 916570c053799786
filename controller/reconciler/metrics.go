package reconciler

import (
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Metrics counts what the reconciler writes, and exports each resource's
// endpoint counts. Reconcile outcomes and durations come from
// controller-runtime's own controller metrics.
type Metrics struct {
	serviceWrites *prometheus.CounterVec
	statusWrites  *prometheus.CounterVec
	slicesDeleted prometheus.Counter
	reverts       *prometheus.CounterVec
	endpoints     *prometheus.GaugeVec

	mu sync.Mutex
	// ports holds the port labels each resource's gauges were last set
	// for, so that a port removed from the spec leaves no stale series.
	ports map[types.NamespacedName][]string
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
		endpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swh_controller_resource_endpoints",
			Help: "Pods of a ServiceWithHealthchecks per port, as in its status.ports: state=ready (ready on the port) or total (published on the port).",
		}, []string{"namespace", "name", "port", "state"}),
		ports: map[types.NamespacedName][]string{},
	}
	for _, c := range []prometheus.Collector{m.serviceWrites, m.statusWrites, m.slicesDeleted, m.reverts, m.endpoints} {
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

// setEndpoints sets a resource's gauges to the per-port counts of its
// status, and deletes those of ports it no longer has.
func (m *Metrics) setEndpoints(key types.NamespacedName, ports []swhv1alpha1.PortStatus) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(ports))
	for _, p := range ports {
		port := endpoints.PortLabel(p.Name, p.Port)
		names = append(names, port)
		m.endpoints.WithLabelValues(key.Namespace, key.Name, port, "ready").Set(float64(p.ReadyEndpoints))
		m.endpoints.WithLabelValues(key.Namespace, key.Name, port, "total").Set(float64(p.TotalEndpoints))
	}
	for _, old := range m.ports[key] {
		if !slices.Contains(names, old) {
			m.endpoints.DeleteLabelValues(key.Namespace, key.Name, old, "ready")
			m.endpoints.DeleteLabelValues(key.Namespace, key.Name, old, "total")
		}
	}
	m.ports[key] = names
}

// forgetEndpoints deletes a deleted resource's gauges.
func (m *Metrics) forgetEndpoints(key types.NamespacedName) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endpoints.DeletePartialMatch(prometheus.Labels{"namespace": key.Namespace, "name": key.Name})
	delete(m.ports, key)
}
