package harness_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/swh-dev/swh/test/harness"
)

// TestCompactEtcdExpiresWatches: after CompactEtcd, a watch of an
// uncached resource from a version before the compaction is told that
// its version expired (410 Gone); DropClientConnections ends a watch that
// is open.
func TestCompactEtcdExpiresWatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := harness.StartControlPlane(ctx, harness.ControlPlaneOptions{
		ExtraAPIServerFlags: map[string]string{"watch-cache-sizes": "configmaps#0"},
	})
	if err != nil {
		harness.Unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	first, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "first"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A watch from first's version starts at second's revision: one write
	// more, so that a compaction at the current revision removes it.
	for _, name := range []string{"second", "third"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Before the compaction, the old version can be watched from.
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added {
			t.Fatalf("before the compaction, a watch from %s got %s %v, want ADDED second", first.ResourceVersion, ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("before the compaction, no event in 10 s")
	}

	// An open watch ends when its connection is reset.
	rev, err := cp.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compacted at revision %d", rev)
	n, err := cp.DropClientConnections()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d connections reset", n)
	select {
	case _, open := <-w.ResultChan():
		for open {
			_, open = <-w.ResultChan()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the open watch did not end once its connection was reset")
	}

	// After it, the same watch is told its version expired.
	w, err = cms.Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
	if err != nil {
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("watch from %s after the compaction: %v, want 410 Gone", first.ResourceVersion, err)
		}
		return
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		st, ok := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !ok || st.Code != http.StatusGone {
			t.Fatalf("watch from %s after the compaction got %s %v, want an error 410", first.ResourceVersion, ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("after the compaction, no 410 in 10 s")
	}
}
