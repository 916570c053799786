package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// SuiteOptions configure RunSuite.
type SuiteOptions struct {
	// Name names the suite in messages.
	Name string
	// ControlPlane configures the suite's control plane.
	ControlPlane ControlPlaneOptions
	// NeedsSandbox requires the network namespace of hack/netns.sh.
	NeedsSandbox bool
	// Setup runs once the control plane is up (create nodes, start a
	// controller); the cleanup it returns, if any, runs after the tests.
	Setup func(ctx context.Context, cp *ControlPlane) (cleanup func(), err error)
}

// RunSuite is the body of a suite's TestMain: one control plane shared by
// the package's tests (each works in namespaces of its own), started once
// and stopped at the end. Missing dependencies skip the suite outside CI
// and fail it in CI. controller-runtime logs errors to stderr, and
// everything with -v. It returns the exit code for os.Exit.
func RunSuite(m *testing.M, opts SuiteOptions) int {
	flag.Parse()
	level := zapcore.ErrorLevel
	if testing.Verbose() {
		level = zapcore.InfoLevel
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(level)))
	unavailable := func(err error) int {
		if errors.Is(err, ErrMissingDependency) && !InCI() {
			fmt.Printf("skipping the %s suite: %v\n", opts.Name, err)
			return 0
		}
		fmt.Printf("the %s suite cannot run: %v\n", opts.Name, err)
		return 1
	}
	if opts.NeedsSandbox && !InNetworkSandbox() {
		return unavailable(fmt.Errorf("%w: pod addresses are not local here; run it through make test (hack/netns.sh)", ErrMissingDependency))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := StartControlPlane(ctx, opts.ControlPlane)
	if err != nil {
		return unavailable(err)
	}
	defer func() { _ = cp.Stop() }()
	if opts.Setup != nil {
		cleanup, err := opts.Setup(ctx, cp)
		if err != nil {
			fmt.Printf("setting up the %s suite: %v\n", opts.Name, err)
			return 1
		}
		if cleanup != nil {
			defer cleanup()
		}
	}
	return m.Run()
}
