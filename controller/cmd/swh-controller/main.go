// Command swh-controller runs the ServiceWithHealthchecks controller: it
// keeps the selector-less child Service of every resource, removes slices
// nobody will update, writes the status, and keeps the per-namespace grants
// that confine the agents (package access); every replica also serves the
// eviction guard's webhook (package disruption). Run one active replica per
// cluster (leader election picks it). The cluster comes from $KUBECONFIG,
// or the in-cluster configuration.
//
// swh-controller hand-back gives every resource's Service back to
// Kubernetes before an uninstall (package handback; the chart's pre-delete
// hook).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/swh-dev/swh/controller/access"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/controller/disruption"
	"github.com/swh-dev/swh/controller/handback"
	"github.com/swh-dev/swh/controller/internal/version"
	"github.com/swh-dev/swh/controller/webhookcert"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "hand-back" {
		handBack(os.Args[2:])
		return
	}
	var opts app.Options
	fs := flag.NewFlagSet("swh-controller", flag.ExitOnError)
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; 0 disables it")
	fs.StringVar(&opts.HealthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz; 0 disables them")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect one active replica through a Lease")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (defaults to the pod's namespace in a cluster)")
	fs.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 4, "resources reconciled in parallel")
	qps := fs.Float64("kube-api-qps", 50, "requests per second to the API server")
	burst := fs.Int("kube-api-burst", 100, "burst of requests to the API server")
	agentSA := fs.String("agent-service-account", "", "<namespace>/<name> of the agents' ServiceAccount, granted get on exactly the Secrets the database probes name (authSecretName), namespace by namespace; empty grants none")
	fs.IntVar(&opts.WebhookPort, "webhook-port", 0, "port of the eviction guard's HTTPS webhook server, which every replica serves (the chart: 9443); 0 disables the guard's webhook (the disruption status is still kept)")
	fs.StringVar(&opts.WebhookCertDir, "webhook-cert-dir", "/etc/swh/webhook", "directory with the webhook server's tls.crt and tls.key (reloaded when they change); unused with --webhook-cert-secret")
	certSecret := fs.String("webhook-cert-secret", "", "<namespace>/<name> of a Secret where the controller keeps the webhook's CA and serving certificate itself, rotating both and injecting the CA into --webhook-configuration; empty: read them from --webhook-cert-dir")
	webhookConfig := fs.String("webhook-configuration", "", "name of the eviction guard's ValidatingWebhookConfiguration, whose caBundle the controller keeps (with --webhook-cert-secret)")
	certHosts := fs.String("webhook-cert-hosts", "", "comma-separated DNS names (or IP addresses) of the webhook's serving certificate: the webhook Service's (with --webhook-cert-secret)")
	fs.DurationVar(&opts.ReservationTimeout, "eviction-reservation-timeout", disruption.DefaultReservationTimeout, "how long an eviction the guard allowed counts against a budget while its pod is neither terminating nor gone")
	fs.DurationVar(&opts.EvictionWebhookTimeout, "eviction-webhook-timeout", disruption.DefaultWebhookTimeout, "the eviction webhook's timeoutSeconds (1s to 30s, the API server's range): the guard answers each eviction within three fifths of it")
	showVersion := fs.Bool("version", false, "print the version and exit")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(version.String("swh-controller"))
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if t := opts.EvictionWebhookTimeout; t < time.Second || t > 30*time.Second {
		fmt.Fprintf(os.Stderr, "swh-controller: --eviction-webhook-timeout %v: must be from 1s to 30s, the webhook's timeoutSeconds\n", t)
		os.Exit(2)
	}
	if *certSecret != "" {
		ns, name, ok := strings.Cut(*certSecret, "/")
		if !ok || ns == "" || name == "" || *webhookConfig == "" || *certHosts == "" {
			fmt.Fprintln(os.Stderr, "swh-controller: --webhook-cert-secret takes <namespace>/<name> and needs --webhook-configuration and --webhook-cert-hosts")
			os.Exit(2)
		}
		opts.WebhookCert = &webhookcert.Options{
			Secret:               types.NamespacedName{Namespace: ns, Name: name},
			WebhookConfiguration: *webhookConfig,
			Hosts:                strings.Split(*certHosts, ","),
		}
	}
	if *agentSA != "" {
		sa, err := access.ParseServiceAccount(*agentSA)
		if err != nil {
			fmt.Fprintln(os.Stderr, "swh-controller: --agent-service-account:", err)
			os.Exit(2)
		}
		opts.AgentServiceAccount = sa
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "swh-controller: finding the cluster:", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	if err := app.Run(ctrl.SetupSignalHandler(), cfg, opts); err != nil {
		fmt.Fprintln(os.Stderr, "swh-controller:", err)
		os.Exit(1)
	}
}

// handBack runs `swh-controller hand-back [flags]`.
func handBack(args []string) {
	fs := flag.NewFlagSet("swh-controller hand-back", flag.ExitOnError)
	deployment := fs.String("controller-deployment", "", "<namespace>/<name> of the controller's Deployment, scaled to zero first; empty: none")
	var opts handback.Options
	fs.StringVar(&opts.WebhookConfiguration, "webhook-configuration", "", "the eviction guard's ValidatingWebhookConfiguration, deleted first (it fails closed and no replica will answer it); empty: none")
	fs.DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "how long each of the two waits lasts at most: the controller's pods stopping, the built-in slices of every Service listing its pods")
	_ = fs.Parse(args)
	if *deployment != "" {
		ns, name, ok := strings.Cut(*deployment, "/")
		if !ok || ns == "" || name == "" {
			fmt.Fprintln(os.Stderr, "swh-controller hand-back: --controller-deployment takes <namespace>/<name>")
			os.Exit(2)
		}
		opts.Controller = types.NamespacedName{Namespace: ns, Name: name}
	}
	opts.Log = os.Stdout
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "swh-controller hand-back: finding the cluster:", err)
		os.Exit(1)
	}
	scheme, err := app.NewScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, "swh-controller hand-back:", err)
		os.Exit(1)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, "swh-controller hand-back: creating the client:", err)
		os.Exit(1)
	}
	if err := handback.Run(ctrl.SetupSignalHandler(), c, opts); err != nil {
		fmt.Fprintln(os.Stderr, "swh-controller hand-back:", err)
		os.Exit(1)
	}
}
