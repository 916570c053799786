package access

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Metrics count the writes of the objects the package manages.
type Metrics struct {
	writes *prometheus.CounterVec
}

// NewMetrics creates the counters and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{writes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swh_controller_access_writes_total",
		Help: "Writes (create, update, delete) of the ConfigMaps swh-services and the Roles and RoleBindings swh-agent-secrets, by kind and result: ok, conflict, forbidden, error. Forbidden on Role: the controller lacks get on secrets (RBAC's escalation check).",
	}, []string{"kind", "result"})}
	if err := reg.Register(m.writes); err != nil {
		return nil, fmt.Errorf("registering the access metrics: %w", err)
	}
	return m, nil
}

func (m *Metrics) write(kind string, err error) {
	if m == nil {
		return
	}
	result := "ok"
	switch {
	case err == nil:
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		result = "conflict"
	case apierrors.IsForbidden(err):
		result = "forbidden"
	default:
		result = "error"
	}
	m.writes.WithLabelValues(kind, result).Inc()
}
