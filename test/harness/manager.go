package harness

import (
	"context"
	"errors"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// RunManager runs mgr (a controller-runtime manager: the controller or an
// agent under test) in the background until stop is called. stop cancels
// it, waits until it has returned, and returns its error unless it only
// reports the cancellation; calling stop again returns the same error.
// Suites' setups use it; tests use StartManager.
func RunManager(ctx context.Context, mgr manager.Runnable) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			err = <-done
			if errors.Is(err, context.Canceled) {
				err = nil
			}
		})
		return err
	}
}

// StartManager runs mgr until the test ends or stop is called, whichever
// comes first (a test stops a manager to restart it or to hand over its
// lease), and fails the test if mgr returned an error of its own: a manager
// that could not start, or one that ended early, is a failure even when the
// test's checks passed.
func StartManager(ctx context.Context, t testing.TB, name string, mgr manager.Runnable) (stop func()) {
	t.Helper()
	stopMgr := RunManager(ctx, mgr)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := stopMgr(); err != nil {
				t.Errorf("%s returned: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
