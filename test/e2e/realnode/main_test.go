package realnode_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/swh-dev/swh/test/e2e/realnode"
	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/images"
)

// cluster is the suite's one cluster: starting it takes half a minute, and
// every scenario leaves it as it found it.
var cluster *realnode.Cluster

// imageList are the images the nodes run (make images builds the same).
var imageList []images.Result

// chartInstalled is how long helm install --wait took.
var chartInstalled time.Duration

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	// The suite's clients log nothing; without a logger controller-runtime
	// prints a warning with a stack trace on the first watch.
	ctrllog.SetLogger(logr.Discard())
	if err := requirements(); err != nil {
		fmt.Println(err)
		if os.Getenv("CI") == "true" {
			return 1
		}
		fmt.Println("SKIP: the real-node suite needs root inside hack/netns.sh (make test)")
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	start := time.Now()
	root, err := harness.RepoRoot()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	// make test builds the images before the suites (SWH_IMAGES); alone,
	// the suite builds its own.
	if dir := os.Getenv("SWH_IMAGES"); dir != "" {
		if imageList, err = images.Load(dir); err != nil {
			fmt.Println(err)
			return 1
		}
	} else {
		out, err := os.MkdirTemp("", "swh-realnode-images-")
		if err != nil {
			fmt.Println(err)
			return 1
		}
		defer os.RemoveAll(out)
		if imageList, err = images.Build(ctx, images.Options{Root: root, Out: out}); err != nil {
			fmt.Println("building the images:", err)
			return 1
		}
		fmt.Printf("images built in %s\n", time.Since(start).Round(time.Second))
	}
	start = time.Now()
	cluster, err = realnode.Start(ctx, realnode.Options{Images: imageList})
	if err != nil {
		fmt.Println("starting the cluster:", err)
		if cluster != nil {
			_ = cluster.RemoveDir()
		}
		return 1
	}
	fmt.Printf("cluster of %d real nodes Ready in %s\n", len(cluster.Nodes), time.Since(start).Round(time.Second))
	code := 1
	start = time.Now()
	// Two controller replicas with leader election, an agent on every node.
	if out, err := cluster.InstallChart(ctx, false, "controller.replicas=2"); err != nil {
		fmt.Println("installing the chart:", err, "\n", out, cluster.Diagnose())
	} else {
		chartInstalled = time.Since(start)
		fmt.Printf("chart installed (helm install --wait) in %s\n", chartInstalled.Round(100*time.Millisecond))
		fmt.Println("footprint:", realnode.Footprint())
		code = m.Run()
	}
	start = time.Now()
	if err := cluster.Stop(); err != nil {
		fmt.Println("stopping the cluster:", err)
		code = 1
	}
	fmt.Printf("cluster stopped in %s\n", time.Since(start).Round(100*time.Millisecond))
	if err := cluster.RemoveDir(); err != nil {
		fmt.Println("removing the cluster's folder:", err)
		code = 1
	}
	// The suite's own deadline covers the start; a long run (make soak)
	// outlives it.
	checkCtx, cancelCheck := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelCheck()
	if err := cluster.Check(checkCtx); err != nil {
		fmt.Println("the cluster left something behind:", err)
		code = 1
	}
	return code
}

// requirements: root inside hack/netns.sh, where 10.244.0.0/16 is local.
func requirements() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the real-node suite runs as root", harness.ErrMissingDependency)
	}
	if os.Getenv("SWH_NETNS") != "1" {
		return fmt.Errorf("%w: run it inside hack/netns.sh", harness.ErrMissingDependency)
	}
	return nil
}
