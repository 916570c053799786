package slicesim

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/endpointslice"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// Builtin is the layout of kube-controller-manager's EndpointSlice
// controller: its Reconciler, fed the pods of a Service, writes into a fake
// clientset that only records the writes (the sink); the layout keeps the
// resulting slices as the API server would.
type Builtin struct {
	rec    *endpointslice.Reconciler
	client *fake.Clientset
	sv     server
	rng    *rand.Rand
	store  map[*Resource][]*discoveryv1.EndpointSlice
	// During one Reconcile: the resource's slices and the writes made.
	current []*discoveryv1.EndpointSlice
	writes  []Write
	err     error
	cluster *Cluster
}

// builtinManager is the built-in controller's field manager.
const builtinManager = "kube-controller-manager"

// NewBuiltin returns the built-in layout for c's nodes, with the
// controller's default of 100 endpoints per slice.
func NewBuiltin(c *Cluster, seed uint64) (*Builtin, error) {
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range c.Nodes {
		if err := nodes.Add(c.nodeObject(i)); err != nil {
			return nil, fmt.Errorf("node lister: %w", err)
		}
	}
	b := &Builtin{
		client: fake.NewSimpleClientset(),
		rng:    rand.New(rand.NewPCG(seed, seed^0xb17)),
		store:  map[*Resource][]*discoveryv1.EndpointSlice{},
	}
	b.client.PrependReactor("*", "endpointslices", b.react)
	b.rec = endpointslice.NewReconciler(b.client, corelisters.NewNodeLister(nodes), 100,
		endpointsliceutil.NewEndpointSliceTracker(), nil, record.NewFakeRecorder(16), "endpointslice-controller.k8s.io")
	return b, nil
}

// Name implements Layout.
func (b *Builtin) Name() string { return "builtin" }

// react is the sink: it plays the API server for the reconciler's writes.
func (b *Builtin) react(action k8stesting.Action) (bool, runtime.Object, error) {
	now := b.cluster.Now
	// By verb: an UpdateAction also satisfies CreateAction.
	switch a := action.(type) {
	case k8stesting.CreateAction:
		s := a.GetObject().(*discoveryv1.EndpointSlice)
		create := action.GetVerb() == "create"
		if create && s.Name == "" {
			s.Name = s.GenerateName + b.token(5)
		}
		b.sv.write(s, builtinManager, now, create)
		b.record(action.GetVerb(), s)
		return true, s.DeepCopy(), nil
	case k8stesting.DeleteAction:
		i := slices.IndexFunc(b.current, func(s *discoveryv1.EndpointSlice) bool { return s.Name == a.GetName() })
		if i < 0 {
			return true, nil, fmt.Errorf("delete of unknown slice %s", a.GetName())
		}
		b.record("delete", b.current[i])
		return true, nil, nil
	}
	return true, nil, fmt.Errorf("unexpected %s of endpointslices", action.GetVerb())
}

func (b *Builtin) record(verb string, s *discoveryv1.EndpointSlice) {
	w, err := measured(verb, s.DeepCopy())
	if err != nil && b.err == nil {
		b.err = err
	}
	b.writes = append(b.writes, w)
}

func (b *Builtin) token(n int) string {
	out := make([]byte, n)
	for i := range out {
		out[i] = alnum[b.rng.IntN(len(alnum))]
	}
	return string(out)
}

// Before implements Layout: the store already holds the slices.
func (b *Builtin) Before(*Cluster, *Resource, []int) (any, error) { return nil, nil }

// After implements Layout: one Reconcile of the Service with all its pods,
// as the controller syncs a Service on any change to one of them.
func (b *Builtin) After(c *Cluster, r *Resource, _ []int, _ any) ([]Write, error) {
	pods := make([]*corev1.Pod, len(r.Pods))
	for i, p := range r.Pods {
		pods[i] = c.podObject(r, p)
	}
	b.cluster, b.current, b.writes, b.err = c, b.store[r], nil, nil
	err := b.rec.Reconcile(logr.Discard(), serviceObject(r), pods, b.current, c.Now)
	b.client.ClearActions()
	if err == nil {
		err = b.err
	}
	if err != nil {
		return nil, fmt.Errorf("reconciling %s/%s: %w", r.Namespace, r.Name, err)
	}
	next := slices.Clone(b.current)
	for _, w := range b.writes {
		i := slices.IndexFunc(next, func(s *discoveryv1.EndpointSlice) bool { return s.Name == w.Obj.Name })
		switch {
		case w.Verb == "delete":
			next = slices.Delete(next, i, i+1)
		case i >= 0:
			next[i] = w.Obj
		default:
			next = append(next, w.Obj)
		}
	}
	b.store[r] = next
	return b.writes, nil
}

// Slices returns the slices the store holds for r.
func (b *Builtin) Slices(r *Resource) []*discoveryv1.EndpointSlice { return b.store[r] }
