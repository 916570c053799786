package publisher

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRetry: which answers are tried again, how often, and that a
// Retry-After is waited for.
func TestRetry(t *testing.T) {
	slices := schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}
	unavailable := apierrors.NewServiceUnavailable("etcd leader changed")
	throttled := apierrors.NewTooManyRequests("slow down", 1) // Retry-After: 1
	conflict := apierrors.NewConflict(slices, "web-http-node-1", errors.New("changed"))
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	for _, tc := range []struct {
		name    string
		ctx     context.Context
		answers []error // the write's answers, in order; nil ends them
		// wantCalls is how many times the write runs; wantErr the error
		// retry returns; minTime the least it may take.
		wantCalls int
		wantErr   error
		minTime   time.Duration
	}{
		{name: "success", answers: []error{nil}, wantCalls: 1},
		{name: "transient then success", answers: []error{unavailable, unavailable, nil}, wantCalls: 3},
		{name: "a conflict returns at once", answers: []error{conflict}, wantCalls: 1, wantErr: conflict},
		{name: "transient then a conflict", answers: []error{unavailable, conflict}, wantCalls: 2, wantErr: conflict},
		{name: "always transient: the last answer after every attempt", answers: repeat(unavailable, 20), wantCalls: writeBackoff.Steps, wantErr: unavailable},
		{name: "Retry-After is waited for", answers: []error{throttled, nil}, wantCalls: 2, minTime: maxRetryAfter},
		{name: "a canceled context writes nothing", ctx: canceled, answers: []error{nil}, wantCalls: 0, wantErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			calls := 0
			start := time.Now()
			err := retry(ctx, func() error {
				calls++
				return tc.answers[calls-1]
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("retry returned %v, want %v", err, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Errorf("the write ran %d times, want %d", calls, tc.wantCalls)
			}
			if took := time.Since(start); took < tc.minTime {
				t.Errorf("retry took %v, want at least %v", took, tc.minTime)
			}
		})
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}
