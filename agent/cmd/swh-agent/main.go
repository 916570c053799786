// Command swh-agent runs on every node (a DaemonSet): it probes the pods of
// its node selected by ServiceWithHealthchecks resources and publishes those
// that pass as EndpointSlices. The node name comes from --node-name or
// $NODE_NAME (the downward API's spec.nodeName); the cluster from
// $KUBECONFIG or the in-cluster configuration.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/swh-dev/swh/agent/app"
	"github.com/swh-dev/swh/agent/internal/version"
	"github.com/swh-dev/swh/agent/publisher"
)

func main() {
	var opts app.Options
	fs := flag.NewFlagSet("swh-agent", flag.ExitOnError)
	fs.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"), "exact name of this node's Node object")
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; 0 disables it")
	fs.BoolVar(&opts.ServeHistory, "serve-history", false, "serve the targets' last transitions on the metrics address (/history) for kubectl swh history; it tells pod names and probe reasons of every namespace to whoever reaches that port")
	fs.StringVar(&opts.HealthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz; 0 disables them")
	fs.DurationVar(&opts.Publisher.Coalesce, "coalesce", 0, "how long verdict changes wait to be written together at most (default 30ms); the wait ends once every target of the resource has reported for the change's round")
	failStatic := fs.Bool("fail-static", true, "keep publishing the endpoints that passed when the failures point at the checker rather than the pods (a probe that cannot run, every pod refusing its credentials, every probe of the node timing out); false withdraws every failing target")
	fs.BoolVar(&opts.Publisher.CoalesceWholeWindow, "coalesce-whole-window", false, "always wait out --coalesce, even when the change's round of results is complete")
	fs.IntVar(&opts.Publisher.MaxConcurrentProbes, "max-concurrent-probes", 0, "probes in flight at most (default 1024)")
	fs.IntVar(&opts.Publisher.MaxConcurrentProbesPerNamespace, "max-concurrent-probes-per-namespace", 0, "probes in flight at most for the resources of one namespace (default a quarter of --max-concurrent-probes)")
	secretMiB := fs.Int64("secret-cache-mib", publisher.DefaultSecretCacheBytes>>20, "MiB of database probes' credentials Secrets kept at most, every namespace together; past it a Secret's probes fail with reason secret")
	secretNamespaceMiB := fs.Int64("secret-cache-namespace-mib", publisher.DefaultSecretCacheNamespaceBytes>>20, "MiB of one namespace's database credentials Secrets kept at most; past it a Secret's probes fail with reason secret")
	qps := fs.Float64("kube-api-qps", 20, "requests per second to the API server")
	burst := fs.Int("kube-api-burst", 50, "burst of requests to the API server")
	showVersion := fs.Bool("version", false, "print the version and exit")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	_ = fs.Parse(os.Args[1:])
	opts.Publisher.FailClosed = !*failStatic
	if *showVersion {
		fmt.Println(version.String("swh-agent"))
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if *secretMiB <= 0 || *secretNamespaceMiB <= 0 {
		fmt.Fprintf(os.Stderr, "swh-agent: --secret-cache-mib (%d) and --secret-cache-namespace-mib (%d) must be positive\n", *secretMiB, *secretNamespaceMiB)
		os.Exit(2)
	}
	opts.Publisher.SecretCacheBytes, opts.Publisher.SecretCacheNamespaceBytes = *secretMiB<<20, *secretNamespaceMiB<<20

	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "swh-agent: finding the cluster:", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	mgr, err := app.NewManager(cfg, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "swh-agent:", err)
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "swh-agent:", err)
		os.Exit(1)
	}
}
