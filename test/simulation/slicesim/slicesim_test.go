package slicesim

import (
	"bytes"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/client-go/kubernetes/scheme"
)

// tiny is a cluster whose figures are counted by hand: three nodes; "web"
// with ports http and metrics, one pod per node; "db" with one unnamed port,
// two pods on node 0.
func tiny(t *testing.T) (*Sim, *Resource, *Resource) {
	t.Helper()
	c := NewCluster([]Node{{"node-a", "z1"}, {"node-b", "z1"}, {"node-c", "z1"}}, 7)
	web := c.NewResource("shop", "web", Port("http", 80, 8080), Port("metrics", 9090, 9090))
	db := c.NewResource("shop", "db", Port("", 5432, 5432))
	for n := range 3 {
		c.AddPod(web, n)
	}
	c.AddPod(db, 0)
	c.AddPod(db, 0)
	c.Resources = []*Resource{web, db}
	builtin, err := NewBuiltin(c, 7)
	if err != nil {
		t.Fatal(err)
	}
	// Grouped: web (3 nodes) is above the threshold, db (1 node) is not;
	// groups of 3 nodes make one group.
	return &Sim{C: c, Layouts: []Layout{NewOurs(Grouping{}), builtin, NewOurs(Grouping{Threshold: 2, NodesPerGroup: 3})}}, web, db
}

// counts is writes and endpoints written, per layout: ours, builtin, grouped.
type counts [3]struct{ creates, updates, deletes, endpoints int }

func countsOf(ts []Totals) counts {
	var out counts
	for i, t := range ts {
		out[i].creates, out[i].updates, out[i].deletes, out[i].endpoints = t.Creates, t.Updates, t.Deletes, t.Endpoints
	}
	return out
}

func TestTinyClusterCounts(t *testing.T) {
	sim, web, db := tiny(t)
	type cnt = struct{ creates, updates, deletes, endpoints int }
	steps := []struct {
		name string
		run  func() ([]Totals, error)
		want counts
	}{{
		// ours: web 2 ports × 3 nodes, db 1 slice; builtin: one slice per
		// Service; grouped: web 2 ports × 1 group, db per node.
		name: "steady state",
		run:  func() ([]Totals, error) { return sim.Steady([]int{1, 1, 1}, nil) },
		want: counts{cnt{7, 0, 0, 8}, cnt{2, 0, 0, 5}, cnt{3, 0, 0, 8}},
	}, {
		// One slice rewritten by each; builtin's holds the pod on both ports.
		name: "web's pod on node-b fails http",
		run:  func() ([]Totals, error) { return sim.FlipPort(web, web.Pods[1]) },
		want: counts{cnt{0, 1, 0, 1}, cnt{0, 1, 0, 3}, cnt{0, 1, 0, 3}},
	}, {
		// ours: node-a's three slices; builtin: both Services' slices;
		// grouped: web's two group slices and db's node slice.
		name: "node-a not Ready",
		run:  func() ([]Totals, error) { return sim.NodeFailure(0) },
		want: counts{cnt{0, 3, 0, 4}, cnt{0, 2, 0, 5}, cnt{0, 3, 0, 8}},
	}, {
		// db's two pods move from node-a to node-b, four syncs each. ours:
		// create db-node-b (1 endpoint), update it (1), update db-node-a
		// (2: one terminating), update it (1); then update db-node-b (2)
		// twice, db-node-a (1), delete it (its last state: 1). builtin: eight
		// updates of its slice of 3, 3, 3, 2, 3, 3, 3, 2 endpoints.
		name: "rolling update of db onto node-b",
		run:  func() ([]Totals, error) { return sim.RollingUpdate(db, func() int { return 1 }) },
		want: counts{cnt{1, 6, 1, 11}, cnt{0, 8, 0, 22}, cnt{1, 6, 1, 11}},
	}}
	for _, st := range steps {
		ts, err := st.run()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := countsOf(ts); got != st.want {
			t.Errorf("%s: got (ours, builtin, grouped) %+v, want %+v", st.name, got, st.want)
		}
	}
}

// TestMeasureMatchesTheAPIServersEncoding: Measure's sizes are those of
// apimachinery's protobuf serializer (what etcd stores) and of its watch
// stream (a length-framed WatchEvent around that encoding).
func TestMeasureMatchesTheAPIServersEncoding(t *testing.T) {
	sim, web, _ := tiny(t)
	ws, err := sim.Layouts[1].After(sim.C, web, web.NodesOf(), nil)
	if err != nil || len(ws) != 1 {
		t.Fatalf("builtin slices of web: %d, %v", len(ws), err)
	}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	obj := ws[0].Obj
	var stored bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(info.Serializer, discoveryv1.SchemeGroupVersion).Encode(obj, &stored); err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	enc := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(&stream), info.StreamSerializer.Serializer)
	if err := enc.Encode(&metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: stored.Bytes()}}); err != nil {
		t.Fatal(err)
	}
	got, err := Measure(obj, "ADDED")
	if err != nil {
		t.Fatal(err)
	}
	if got.Stored != stored.Len() || got.Event != stream.Len() {
		t.Errorf("Measure: stored %d, event %d; the API server's encoders: %d, %d", got.Stored, got.Event, stored.Len(), stream.Len())
	}
	if got.Stored < 500 || got.JSON <= got.Stored {
		t.Errorf("implausible sizes %+v for a slice of 3 endpoints", got)
	}
}

// TestGenerateShape: the generator meets its configuration exactly.
func TestGenerateShape(t *testing.T) {
	cfg := Config{Nodes: 40, Resources: 30, Pods: 800, DaemonSets: 2, Big: 100, Seed: 3}
	c, err := Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nodes) != 40 || len(c.Resources) != cfg.Resources || c.Pods() != cfg.Pods {
		t.Errorf("got %d nodes, %d resources, %d pods; want %+v", len(c.Nodes), len(c.Resources), c.Pods(), cfg)
	}
	for _, r := range c.Resources {
		if !r.DaemonSet && r.Name != "storefront-web" && (len(r.Pods) < 3 || len(r.Pods) > 300) {
			t.Errorf("%s: %d replicas", r.Name, len(r.Pods))
		}
	}
}
