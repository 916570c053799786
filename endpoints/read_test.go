package endpoints

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func pointer[T any](v T) *T { return &v }

// readSlice is one slice of port on node, as Build labels it.
func readSlice(port, node string, family discoveryv1.AddressType, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
	return discoveryv1.EndpointSlice{
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: pointer(port), Port: pointer[int32](8080)}},
		Endpoints:   eps,
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
			discoveryv1.LabelManagedBy: DefaultManagedBy,
			DefaultNodeLabel:           NodeLabelValue(node),
		}},
	}
}

func readEntry(pod, node, address string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses:  []string{address},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating},
		NodeName:   pointer(node),
	}
	if pod != "" {
		ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID("uid-" + pod)}
	}
	return ep
}

// brief1 prints a Published as the table below states it.
func brief1(p Published) string {
	flags := []string{}
	for _, f := range []struct {
		on   bool
		name string
	}{{p.Ready, "ready"}, {p.Serving, "serving"}, {p.Terminating, "terminating"}} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	return fmt.Sprintf("%s %s@%s %s x%d", p.Port, p.Key, p.Node, strings.Join(flags, ","), p.Entries)
}

// TestRead pins the read side's rules: nil conditions as the API says,
// a pod published in two families is ready only when both entries are,
// a slice speaks only for its own node, other managers' slices are not
// read.
func TestRead(t *testing.T) {
	yes, no := pointer(true), pointer(false)
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	tests := []struct {
		name   string
		slices []discoveryv1.EndpointSlice
		want   []string
	}{
		{"explicit conditions", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", yes, yes, no), readEntry("b", "n1", "10.0.0.2", no, yes, yes)),
		}, []string{"http uid-a@n1 ready,serving x1", "http uid-b@n1 serving,terminating x1"}},
		{"nil conditions: ready, serving, not terminating", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", nil, nil, nil)),
		}, []string{"http uid-a@n1 ready,serving x1"}},
		{"dual stack, both ready", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", yes, yes, no)),
			readSlice("http", "n1", v6, readEntry("a", "n1", "fd00::1", yes, yes, no)),
		}, []string{"http uid-a@n1 ready,serving x2"}},
		{"dual stack, one family not ready: not ready", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", yes, yes, no)),
			readSlice("http", "n1", v6, readEntry("a", "n1", "fd00::1", no, no, no)),
		}, []string{"http uid-a@n1  x2"}},
		{"dual stack, one family terminating: terminating", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", no, yes, yes)),
			readSlice("http", "n1", v6, readEntry("a", "n1", "fd00::1", yes, yes, nil)),
		}, []string{"http uid-a@n1 serving,terminating x2"}},
		{"ports apart", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", yes, yes, no)),
			readSlice("admin", "n1", v4, readEntry("a", "n1", "10.0.0.1", no, no, no)),
		}, []string{"admin uid-a@n1  x1", "http uid-a@n1 ready,serving x1"}},
		{"an entry naming another node is not read", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "n2", "10.0.0.1", yes, yes, no), readEntry("b", "n1", "10.0.0.2", yes, yes, no)),
		}, []string{"http uid-b@n1 ready,serving x1"}},
		{"an entry without a nodeName is not read", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, func() discoveryv1.Endpoint {
				ep := readEntry("a", "n1", "10.0.0.1", yes, yes, no)
				ep.NodeName = nil
				return ep
			}()),
		}, []string{}},
		{"the same pod from two nodes' slices stays apart", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", yes, yes, no)),
			readSlice("http", "n2", v4, readEntry("a", "n2", "10.0.0.1", no, no, no)),
		}, []string{"http uid-a@n1 ready,serving x1", "http uid-a@n2  x1"}},
		{"no target reference: keyed by address", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("", "n1", "10.0.0.9", yes, yes, no)),
		}, []string{"http 10.0.0.9@n1 ready,serving x1"}},
		{"an empty nodeName speaks for no node", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "", "10.0.0.1", yes, yes, no)),
		}, []string{}},
		{"a node name longer than a label: its hashed label matches", []discoveryv1.EndpointSlice{
			readSlice("http", strings.Repeat("n", 70), v4, readEntry("a", strings.Repeat("n", 70), "10.0.0.1", yes, yes, no)),
		}, []string{"http uid-a@" + strings.Repeat("n", 70) + " ready,serving x1"}},
		{"a target reference without a UID: keyed by name", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, func() discoveryv1.Endpoint {
				ep := readEntry("a", "n1", "10.0.0.1", yes, yes, no)
				ep.TargetRef.UID = ""
				return ep
			}()),
		}, []string{"http a@n1 ready,serving x1"}},
		{"the same entry in two slices: one address", []discoveryv1.EndpointSlice{
			readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", yes, yes, no)),
			readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", yes, yes, no)),
		}, []string{"http uid-a@n1 ready,serving x2 [10.0.0.1]"}},
		{"another manager's slice is not read", []discoveryv1.EndpointSlice{
			func() discoveryv1.EndpointSlice {
				s := readSlice("http", "n1", v4, readEntry("a", "n1", "10.0.0.1", yes, yes, no))
				s.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
				return s
			}(),
		}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(tt.slices, Options{})
			if err != nil {
				t.Fatal(err)
			}
			lines := []string{}
			for _, p := range got {
				line := brief1(p)
				if p.Entries > len(p.Addresses) {
					line += fmt.Sprint(" ", p.Addresses)
				}
				lines = append(lines, line)
			}
			if !reflect.DeepEqual(lines, tt.want) {
				t.Errorf("Read:\n got %q\nwant %q", lines, tt.want)
			}
		})
	}
}

// TestReadInvertsBuild: what Build publishes, Read reads back.
func TestReadInvertsBuild(t *testing.T) {
	svc := testService(svcPort("http", 80, num(8080)), svcPort("admin", 81, num(9090)))
	pods := []PodVerdicts{
		{Pod: testPod("a", []string{"10.0.0.1", "fd00::1"}), Ports: []PortVerdict{{Port: 8080, Passing: true}, {Port: 9090}}},
		{Pod: testPod("b", []string{"10.0.0.2"}, terminating), Ports: []PortVerdict{{Port: 8080, Passing: true}, {Port: 9090, Passing: true}}},
	}
	slices, err := Build(svc, Node{Name: "node1"}, pods, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(slices, Options{})
	if err != nil {
		t.Fatal(err)
	}
	lines := []string{}
	for _, p := range got {
		lines = append(lines, fmt.Sprintf("%s %s %v", brief1(p), p.Addresses, p.Available()))
	}
	want := []string{
		"admin uid-a@node1  x2 [10.0.0.1 fd00::1] false",
		"admin uid-b@node1 serving,terminating x1 [10.0.0.2] false",
		"http uid-a@node1 ready,serving x2 [10.0.0.1 fd00::1] true",
		"http uid-b@node1 serving,terminating x1 [10.0.0.2] false",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("Read(Build(...)):\n got %q\nwant %q", lines, want)
	}
}

// TestReadOptions: Read reads the slices of its own options only, and
// refuses invalid ones.
func TestReadOptions(t *testing.T) {
	yes, no := pointer(true), pointer(false)
	mine := readSlice("http", "n1", discoveryv1.AddressTypeIPv4, readEntry("a", "n1", "10.0.0.1", yes, yes, no))
	mine.Labels = map[string]string{discoveryv1.LabelManagedBy: "other.example.com", "example.com/node": "n1"}
	opts := Options{ManagedBy: "other.example.com", NodeLabel: "example.com/node"}
	got, err := Read([]discoveryv1.EndpointSlice{mine}, opts)
	if err != nil || len(got) != 1 || got[0].Key != "uid-a" {
		t.Errorf("Read with its own options = %v, %v; want uid-a", got, err)
	}
	if got, _ := Read([]discoveryv1.EndpointSlice{mine}, Options{}); len(got) != 0 {
		t.Errorf("Read with the default options read another manager's slice: %v", got)
	}
	if _, err := Read(nil, Options{ManagedBy: "not a label value"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid options: %v, want ErrInvalid", err)
	}
}
