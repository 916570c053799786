package exclusive

import (
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/swh-dev/swh/endpoints"
)

func slice(port, node string, conds ...discoveryv1.EndpointConditions) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{endpoints.DefaultNodeLabel: node}},
		Ports:      []discoveryv1.EndpointPort{{Name: &port}},
	}
	for _, c := range conds {
		n := node
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: &n, Conditions: c})
	}
	return s
}

func TestServing(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name  string
		slice discoveryv1.EndpointSlice
		port  string
		want  string
	}{
		{"ready", slice("write", "n1", discoveryv1.EndpointConditions{Ready: &yes}), "write", "n1"},
		{"nil conditions read as ready, as kube-proxy reads them", slice("write", "n1", discoveryv1.EndpointConditions{}), "write", "n1"},
		{"serving only (terminating)", slice("write", "n1", discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}), "write", "n1"},
		{"withdrawn", slice("write", "n1", discoveryv1.EndpointConditions{Ready: &no, Serving: &no}), "write", ""},
		{"another port", slice("read", "n1", discoveryv1.EndpointConditions{Ready: &yes}), "write", ""},
		{"one of two serves", slice("write", "n1", discoveryv1.EndpointConditions{Ready: &no, Serving: &no}, discoveryv1.EndpointConditions{Ready: &yes}), "write", "n1"},
		{"no endpoints", slice("write", "n1"), "write", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serving(&tt.slice, tt.port); got != tt.want {
				t.Errorf("serving = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSightings: a Lease expires a duration after the controller first saw
// its resourceVersion; a resize by the controller keeps the sighting's time
// and the longer duration until the holder writes again.
func TestSightings(t *testing.T) {
	r := &Reconciler{}
	key := types.NamespacedName{Namespace: "ns", Name: "swh.db.write"}
	first := r.sight(key, "1")
	if again := r.sight(key, "1"); !again.at.Equal(first.at) || again.floor != 0 {
		t.Fatalf("the same resourceVersion seen again: %+v, want %+v", again, first)
	}
	r.resized(key, "2", 60*time.Second)
	if got := r.sight(key, "2"); !got.at.Equal(first.at) || got.floor != 60*time.Second {
		t.Fatalf("after a resize from 60 s: %+v, want the first sighting's time and a 60 s floor", got)
	}
	time.Sleep(time.Millisecond)
	if got := r.sight(key, "3"); !got.at.After(first.at) || got.floor != 0 {
		t.Fatalf("after the holder wrote: %+v, want a new time and no floor", got)
	}
	r.forget(types.NamespacedName{Namespace: "ns", Name: "db"})
	if len(r.seen) != 0 {
		t.Fatalf("forgetting resource db left %v", r.seen)
	}
}
