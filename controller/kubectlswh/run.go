package kubectlswh

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// OutputGroupVersion is the apiVersion of what -o json, yaml, jsonpath,
// name and go-template print: Status, StatusList and Why.
const OutputGroupVersion = "kubectl.swh.dev/v1alpha1"

func (o *options) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Every pod on every port of a resource, and why it is out; every resource without NAME",
		Example: `  kubectl swh status db -n shop            # every pod of db on every port
  kubectl swh status db -o wide             # with the pods' addresses and the slices
  kubectl swh status -A                     # every resource of the cluster
  kubectl swh status db -o jsonpath='{.ports[*].ready}'`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: o.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			printer, err := o.printer()
			if err != nil {
				return err
			}
			if o.allNamespaces && len(args) == 1 {
				return fmt.Errorf("a resource name and --all-namespaces: give one or the other")
			}
			s, err := o.connect()
			if err != nil {
				return err
			}
			if len(args) == 0 {
				return o.list(cmd.Context(), s, printer)
			}
			snap, err := Read(cmd.Context(), s.client, s.namespace, args[0], s.agents)
			if err != nil {
				return err
			}
			st := BuildStatus(snap)
			if printer == nil {
				return writeStatusTable(o.streams.Out, st, tableOptions{wide: o.format() == "wide", noHeaders: o.noHeaders}, time.Now())
			}
			return printAs(printer, o.streams.Out, "Status", st.Namespace, st.Name, st)
		},
	}
	o.addOutputFlags(cmd)
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list the resources of every namespace")
	return cmd
}

func (o *options) whyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "why NAME POD",
		Short: "Everything that decides POD's traffic on each port of NAME",
		Example: `  kubectl swh why db db-0 -n shop
  kubectl swh why db db-0 -o json`,
		Args: cobra.ExactArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return o.completeResources(cmd, args, toComplete)
			}
			return o.completePods(cmd, args, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			printer, err := o.printer()
			if err != nil {
				return err
			}
			if o.format() == "wide" {
				return fmt.Errorf("-o wide: why prints sentences; use text, json, yaml, jsonpath or go-template")
			}
			s, err := o.connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			snap, err := Read(ctx, s.client, s.namespace, args[0], s.agents)
			if err != nil {
				return err
			}
			pod := &corev1.Pod{}
			if err := s.client.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: args[1]}, pod); err != nil {
				return fmt.Errorf("reading pod %s/%s: %w", s.namespace, args[1], err)
			}
			if err := addNode(ctx, s.client, snap, pod); err != nil {
				return err
			}
			lines := Why(snap, pod, time.Now())
			if printer == nil {
				for _, line := range lines {
					fmt.Fprintln(o.streams.Out, line)
				}
				return nil
			}
			return printAs(printer, o.streams.Out, "Why", s.namespace, args[0],
				WhyReport{Namespace: s.namespace, Name: args[0], Pod: args[1], Sentences: lines})
		},
	}
	o.addOutputFlags(cmd)
	return cmd
}

// WhyReport is what `kubectl swh why -o json|yaml` prints.
type WhyReport struct {
	Namespace string `json:"namespace"`
	// Name is the resource's.
	Name      string   `json:"name"`
	Pod       string   `json:"pod"`
	Sentences []string `json:"sentences"`
}

// completePods completes the pods the resource args[0] selects.
func (o *options) completePods(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) != 1 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	s, err := o.connect()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	r := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: args[0]}, r); err != nil || len(r.Spec.Selector) == 0 {
		return nil, cobra.ShellCompDirectiveError
	}
	pods := &corev1.PodList{}
	if err := s.client.List(ctx, pods, client.InNamespace(s.namespace), client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(r.Spec.Selector)}); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// printAs prints v through a cli-runtime printer, as an object of kind
// with v's fields: the printers print objects, which carry a kind, an
// apiVersion and metadata (what -o name prints).
func printAs(p printers.ResourcePrinter, w io.Writer, kind, namespace, name string, v any) error {
	obj, err := asObject(kind, namespace, name, v)
	if err != nil {
		return err
	}
	return p.PrintObj(obj, w)
}

// asObject is v's fields as an object of kind, named namespace/name.
func asObject(kind, namespace, name string, v any) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s: %w", kind, err)
	}
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &obj.Object); err != nil {
		return nil, err
	}
	obj.SetAPIVersion(OutputGroupVersion)
	obj.SetKind(kind)
	obj.SetName(name)
	if namespace != "" {
		obj.SetNamespace(namespace)
	}
	return obj, nil
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
