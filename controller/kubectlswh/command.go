package kubectlswh

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/internal/version"
)

// DefaultAgentSelector selects the Helm chart's agent pods.
const DefaultAgentSelector = "app.kubernetes.io/name=swh,app.kubernetes.io/component=agent"

// tableFormats are the outputs the plugin prints itself; the others are
// cli-runtime's printers (json, yaml, name, jsonpath, go-template, ...).
var tableFormats = []string{"", "text", "wide"}

// options are the flags every command shares: the cluster (kubectl's own
// flags, from cli-runtime), where the agents run, and the output.
type options struct {
	config         *genericclioptions.ConfigFlags
	print          *genericclioptions.PrintFlags
	agentNamespace string
	agentSelector  string
	noHeaders      bool
	allNamespaces  bool
	streams        genericiooptions.IOStreams
}

// Run is the plugin's main: args without the program name. It returns
// the error to print; help and completion return nil.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: stdout, ErrOut: stderr})
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}

// NewCommand returns the plugin's command tree: status, why, history,
// version, and cobra's completion.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{
		config:  genericclioptions.NewConfigFlags(true),
		print:   genericclioptions.NewPrintFlags(""),
		streams: streams,
	}
	root := &cobra.Command{
		Use:   "kubectl-swh",
		Short: "Why a ServiceWithHealthchecks sends traffic where it does",
		Long: `kubectl swh tells which pod receives traffic on which port of a
ServiceWithHealthchecks, and why not, from what the agents publish. It needs
read access only: the resources, their pods, EndpointSlices and Services,
and (optionally) nodes and the agent pods.`,
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl swh"},
		Version:     version.String("kubectl-swh"),
		// Errors are printed once, by main, after "error: ", as kubectl does.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	flags := root.PersistentFlags()
	o.config.AddFlags(flags)
	flags.StringVar(&o.agentNamespace, "agent-namespace", "swh-system", "namespace of the agent pods (the chart's release namespace)")
	flags.StringVar(&o.agentSelector, "agent-selector", DefaultAgentSelector, "label selector of the agent pods")
	root.AddCommand(o.statusCommand(), o.whyCommand(), o.historyCommand(), o.versionCommand())
	return root
}

// addOutputFlags adds -o (text, wide, and cli-runtime's formats) and
// --no-headers to cmd.
func (o *options) addOutputFlags(cmd *cobra.Command) {
	o.print.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "output format: text (the default), wide, " + strings.Join(o.print.AllowedFormats(), ", ")
	cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "print the text and wide tables without their headers")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append([]string{"text", "wide"}, o.print.AllowedFormats()...), cobra.ShellCompDirectiveNoFileComp
	})
}

// format is the output format asked for.
func (o *options) format() string { return *o.print.OutputFormat }

// printer is cli-runtime's printer of the format asked for; nil for the
// plugin's own tables. Called before reading anything, so that a wrong
// -o fails at once.
func (o *options) printer() (printers.ResourcePrinter, error) {
	// --template without -o is a go-template, as in kubectl.
	template := o.print.TemplatePrinterFlags != nil && o.print.TemplatePrinterFlags.TemplateArgument != nil &&
		*o.print.TemplatePrinterFlags.TemplateArgument != ""
	for _, f := range tableFormats {
		if o.format() == f && !(f == "" && template) {
			return nil, nil
		}
	}
	p, err := o.print.ToPrinter()
	if err != nil {
		return nil, fmt.Errorf("-o %s: %w (or text, wide)", o.format(), err)
	}
	return p, nil
}

// session is a connection to the cluster for one command.
type session struct {
	client client.Client
	// clientset reaches the agents through the API server's pod proxy.
	clientset kubernetes.Interface
	namespace string
	agents    AgentLocation
}

// connect builds the client from kubectl's flags.
func (o *options) connect() (*session, error) {
	selector, err := labels.Parse(o.agentSelector)
	if err != nil {
		return nil, fmt.Errorf("--agent-selector: %w", err)
	}
	ns, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig's namespace: %w", err)
	}
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-swh"
	// A few reads per node of the resource's pods: client-go's default
	// 5 per second would take a minute on a large cluster.
	cfg.QPS, cfg.Burst = 50, 100
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering the Kubernetes types: %w", err)
	}
	if err := swhv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering the swh types: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the clientset: %w", err)
	}
	return &session{client: c, clientset: cs, namespace: ns, agents: AgentLocation{Namespace: o.agentNamespace, Selector: selector}}, nil
}

func (o *options) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(o.streams.Out, version.String("kubectl-swh"))
			return err
		},
	}
}

// completeResources completes the names of the ServiceWithHealthchecks of
// the namespace.
func (o *options) completeResources(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	s, err := o.connect()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := s.client.List(ctx, list, client.InNamespace(s.namespace)); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, r := range list.Items {
		if strings.HasPrefix(r.Name, toComplete) {
			names = append(names, r.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
