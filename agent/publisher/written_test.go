package publisher

import (
	"errors"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestWrittenSlicesLagging(t *testing.T) {
	key := types.NamespacedName{Namespace: "shop", Name: "web"}
	slice := func(name, rv string) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	for _, tc := range []struct {
		name   string
		record func(w *writtenSlices)
		cached []discoveryv1.EndpointSlice
		want   []bool // lagging, asked twice with the same cache
	}{
		{"nothing written", func(*writtenSlices) {}, []discoveryv1.EndpointSlice{slice("a", "1")}, []bool{false, false}},
		{"the cache shows the write", func(w *writtenSlices) { w.wrote(key, "a", "7") }, []discoveryv1.EndpointSlice{slice("a", "7")}, []bool{false, false}},
		{"the cache is older than the write", func(w *writtenSlices) { w.wrote(key, "a", "7") }, []discoveryv1.EndpointSlice{slice("a", "5")}, []bool{true, true}},
		{"a created slice not cached yet", func(w *writtenSlices) { w.wrote(key, "b", "8") }, []discoveryv1.EndpointSlice{slice("a", "5")}, []bool{true, true}},
		{"a deleted slice still cached", func(w *writtenSlices) { w.deleted(key, "a") }, []discoveryv1.EndpointSlice{slice("a", "5")}, []bool{true, true}},
		{"a deleted slice gone from the cache", func(w *writtenSlices) { w.deleted(key, "a") }, nil, []bool{false, false}},
		{"a conflict reads live until the cache shows that read", func(w *writtenSlices) { w.conflicted(key) }, []discoveryv1.EndpointSlice{slice("a", "5")}, []bool{true, true}},
		{"after a live read the cache must show it", func(w *writtenSlices) {
			w.wrote(key, "a", "7")
			w.readLive(key, []discoveryv1.EndpointSlice{slice("a", "9")})
		}, []discoveryv1.EndpointSlice{slice("a", "7")}, []bool{true, true}},
		{"a live read the cache caught up with", func(w *writtenSlices) {
			w.conflicted(key)
			w.readLive(key, []discoveryv1.EndpointSlice{slice("a", "9")})
		}, []discoveryv1.EndpointSlice{slice("a", "9")}, []bool{false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWrittenSlices()
			tc.record(w)
			for i, want := range tc.want {
				if got := w.lagging(key, tc.cached); got != want {
					t.Errorf("lagging (call %d) = %v, want %v", i+1, got, want)
				}
			}
			if other := (types.NamespacedName{Namespace: "shop", Name: "api"}); w.lagging(other, nil) {
				t.Error("another resource lags")
			}
		})
	}
}

func TestWrittenSlicesAfter(t *testing.T) {
	key := types.NamespacedName{Namespace: "shop", Name: "web"}
	gr := schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}
	written := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-http-node1", ResourceVersion: "7"}}
	for _, tc := range []struct {
		name string
		err  error
		lag  bool // with the cache showing resourceVersion 7
	}{
		{"written", nil, false},
		{"conflict", apierrors.NewConflict(gr, "web-http-node1", errors.New("modified")), true},
		{"name taken", apierrors.NewAlreadyExists(gr, "web-http-node1"), true},
		{"slice gone", apierrors.NewNotFound(gr, "web-http-node1"), true},
		{"timeout: may have landed", apierrors.NewTimeoutError("slow", 1), true},
		{"lost answer", errors.New("http2: server sent GOAWAY"), true},
		{"refused by RBAC", apierrors.NewForbidden(gr, "web-http-node1", errors.New("no")), false},
		{"refused by admission", apierrors.NewInvalid(schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}, "web-http-node1", nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWrittenSlices()
			w.after(key, written, tc.err)
			if got := w.lagging(key, []discoveryv1.EndpointSlice{*written}); got != tc.lag {
				t.Errorf("lagging after %v = %v, want %v", tc.err, got, tc.lag)
			}
		})
	}
}
