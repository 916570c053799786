package reconciler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestServicePortsColumn prints ports as kubectl get service does.
func TestServicePortsColumn(t *testing.T) {
	tests := []struct {
		name  string
		ports []corev1.ServicePort
		want  string
	}{
		{name: "none", want: ""},
		{name: "one", ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}}, want: "443/TCP"},
		{name: "every port", ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}, {Port: 9000, Protocol: corev1.ProtocolTCP}}, want: "443/TCP,9000/TCP"},
		{name: "node ports", ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}, {Port: 53, NodePort: 30053, Protocol: corev1.ProtocolUDP}}, want: "80:30080/TCP,53:30053/UDP"},
		{name: "protocol defaulted", ports: []corev1.ServicePort{{Port: 80}}, want: "80/TCP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := servicePortsColumn(tt.ports); got != tt.want {
				t.Errorf("servicePortsColumn = %q, want %q", got, tt.want)
			}
		})
	}
}
