package kubectlswh

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/internal/version"
)

// DefaultAgentSelector selects the Helm chart's agent pods.
const DefaultAgentSelector = "app.kubernetes.io/name=swh,app.kubernetes.io/component=agent"

const usage = `kubectl swh: why a ServiceWithHealthchecks sends traffic where it does

  kubectl swh status NAME [flags]      every pod on every port, with the reason of those not ready
  kubectl swh why NAME POD [flags]     everything that decides POD's traffic, in sentences

Flags (after the arguments or before them):
`

// Run is the plugin's main: args without the program name.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kubectl swh", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "path of the kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	kubeContext := fs.String("context", "", "the kubeconfig context to use")
	namespace := fs.String("namespace", "", "namespace of the resource (default: the context's)")
	fs.StringVar(namespace, "n", "", "shorthand for --namespace")
	output := fs.String("output", "text", "status output: text, json or yaml")
	fs.StringVar(output, "o", "text", "shorthand for --output")
	agentNamespace := fs.String("agent-namespace", "swh-system", "namespace of the agent pods (the chart's release namespace)")
	agentSelector := fs.String("agent-selector", DefaultAgentSelector, "label selector of the agent pods")
	showVersion := fs.Bool("version", false, "print the plugin's version and exit")
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }

	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("kubectl-swh"))
		return nil
	}
	if len(positional) == 0 {
		fs.Usage()
		return errors.New("a command is required: status or why")
	}
	selector, err := labels.Parse(*agentSelector)
	if err != nil {
		return fmt.Errorf("--agent-selector: %w", err)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kubeContext})
	ns := *namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			return fmt.Errorf("the kubeconfig's namespace: %w", err)
		}
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-swh"
	// A few reads per node of the resource's pods: client-go's default
	// 5 per second would take a minute on a large cluster.
	cfg.QPS, cfg.Burst = 50, 100
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering the Kubernetes types: %w", err)
	}
	if err := swhv1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering the swh types: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating the client: %w", err)
	}
	agents := AgentLocation{Namespace: *agentNamespace, Selector: selector}

	switch cmd := positional[0]; cmd {
	case "status":
		if len(positional) != 2 {
			return errors.New("usage: kubectl swh status NAME")
		}
		snap, err := Read(ctx, c, ns, positional[1], agents)
		if err != nil {
			return err
		}
		return WriteStatus(stdout, BuildStatus(snap), *output, time.Now())
	case "why":
		if len(positional) != 3 {
			return errors.New("usage: kubectl swh why NAME POD")
		}
		snap, err := Read(ctx, c, ns, positional[1], agents)
		if err != nil {
			return err
		}
		pod := &corev1.Pod{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: positional[2]}, pod); err != nil {
			return fmt.Errorf("reading pod %s/%s: %w", ns, positional[2], err)
		}
		if err := addNode(ctx, c, snap, pod); err != nil {
			return err
		}
		for _, line := range Why(snap, pod, time.Now()) {
			fmt.Fprintln(stdout, line)
		}
		return nil
	default:
		fs.Usage()
		return fmt.Errorf("unknown command %q: want status or why", cmd)
	}
}

// addNode reads the node of a pod the resource does not select, which
// Read skipped.
func addNode(ctx context.Context, c client.Reader, s *Snapshot, pod *corev1.Pod) error {
	name := pod.Spec.NodeName
	if name == "" || s.Nodes[name] != nil || s.NodeErrors[name] != nil {
		return nil
	}
	n := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		s.NodeErrors[name] = err
		return nil
	}
	s.Nodes[name] = n
	return nil
}

// parseInterspersed parses flags placed before, between or after the
// positional arguments, as kubectl does.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}
