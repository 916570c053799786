package disruption

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// TestConflictRetriesStopAtTheDeadline: a reservation write that keeps
// conflicting is retried only until the decision's context ends; the
// guard then answers 429 at once instead of retrying on past the time the
// API server waits for it. The test ends the context from the first
// conflicting write and counts the writes after it.
func TestConflictRetriesStopAtTheDeadline(t *testing.T) {
	swh := resource(swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"client"}})
	var cancel context.CancelFunc
	var afterDeadline, writes atomic.Int32
	funcs := interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if writes.Add(1) > 1 {
			afterDeadline.Add(1)
		}
		cancel() // the decision's deadline passes during this write
		return apierrors.NewConflict(schema.GroupResource{Group: swhv1alpha1.GroupVersion.Group, Resource: "servicewithhealthchecks"}, obj.GetName(), nil)
	}}
	g := fakeGuard(t, funcs, append(brokerObjects(map[string]bool{"b-0": true, "b-1": true, "b-2": true}), swh)...)
	g.Now = func() time.Time { return now }
	ctx, c := context.WithCancel(context.Background())
	cancel = c
	resp := g.Handle(ctx, evictionRequest("b-0", `{"kind":"Eviction"}`))
	if resp.Allowed || resp.Result.Code != http.StatusTooManyRequests || !strings.Contains(resp.Result.Message, "could not decide") {
		t.Errorf("answer %+v, want the guard's 429 (could not decide)", resp.Result)
	}
	if n := afterDeadline.Load(); n > 0 {
		t.Errorf("%d reservation writes after the decision's context ended, want none", n)
	}
}

// TestDecisionBoundInsideTheWebhookTimeout: whatever timeoutSeconds the
// webhook has (the API server allows 1 to 30), a decision ends before the
// API server stops waiting, with room left for the answer.
func TestDecisionBoundInsideTheWebhookTimeout(t *testing.T) {
	for s := 1; s <= 30; s++ {
		webhook := time.Duration(s) * time.Second
		g := &Guard{WebhookTimeout: webhook}
		if b := g.decisionTimeout(); b <= 0 || b > webhook*3/5 {
			t.Errorf("timeoutSeconds %d: decisions bounded at %v, want within three fifths of it", s, b)
		}
	}
	if b := (&Guard{}).decisionTimeout(); b != 3*time.Second {
		t.Errorf("default bound %v, want 3s (of the chart's default 5 s)", b)
	}
}
