package publisher

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		{"a conflict reads live once", func(w *writtenSlices) { w.conflicted(key) }, []discoveryv1.EndpointSlice{slice("a", "5")}, []bool{true, true}},
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
