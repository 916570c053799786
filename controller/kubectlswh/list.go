package kubectlswh

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// ListEntry is one resource of `kubectl swh status` without a name: what
// the controller wrote in its status.
type ListEntry struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Ready is pods ready on every port / pods published.
	Ready string          `json:"ready"`
	Ports []ListPortEntry `json:"ports"`
	// ServiceSynced is the condition's reason when it is not True.
	ServiceSynced string      `json:"serviceSynced"`
	Created       metav1.Time `json:"created"`
	Type          string      `json:"type"`
	ClusterIP     string      `json:"clusterIP,omitempty"`
}

// ListPortEntry is one port's counts in a ListEntry.
type ListPortEntry struct {
	Name  string `json:"name,omitempty"`
	Port  int32  `json:"port"`
	Ready int32  `json:"ready"`
	Total int32  `json:"total"`
}

// StatusList is what `kubectl swh status -o json|yaml` prints without a
// name.
type StatusList struct {
	Items []ListEntry `json:"items"`
}

// list prints every resource of the namespace, or of the cluster with -A.
func (o *options) list(ctx context.Context, s *session, printer printers.ResourcePrinter) error {
	resources := &swhv1alpha1.ServiceWithHealthchecksList{}
	var opts []client.ListOption
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(s.namespace))
	}
	if err := s.client.List(ctx, resources, opts...); err != nil {
		return fmt.Errorf("listing ServiceWithHealthchecks: %w", err)
	}
	list := StatusList{Items: []ListEntry{}}
	for i := range resources.Items {
		list.Items = append(list.Items, listEntry(&resources.Items[i]))
	}
	slices.SortFunc(list.Items, func(a, b ListEntry) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	if printer != nil {
		return printList(printer, o.streams.Out, list)
	}
	if len(list.Items) == 0 && !o.noHeaders {
		where := "in namespace " + s.namespace
		if o.allNamespaces {
			where = "in any namespace"
		}
		_, err := fmt.Fprintf(o.streams.ErrOut, "No ServiceWithHealthchecks found %s.\n", where)
		return err
	}
	return writeListTable(o.streams.Out, list, tableOptions{wide: o.format() == "wide", noHeaders: o.noHeaders}, o.allNamespaces, time.Now())
}

func listEntry(r *swhv1alpha1.ServiceWithHealthchecks) ListEntry {
	e := ListEntry{Namespace: r.Namespace, Name: r.Name, Ready: r.Status.Ready, Created: r.CreationTimestamp,
		Type: string(r.Spec.Type), ClusterIP: r.Status.ClusterIP, Ports: []ListPortEntry{}}
	if e.Type == "" {
		e.Type = "ClusterIP"
	}
	for _, p := range r.Status.Ports {
		e.Ports = append(e.Ports, ListPortEntry{Name: p.Name, Port: p.Port, Ready: p.ReadyEndpoints, Total: p.TotalEndpoints})
	}
	switch c := meta.FindStatusCondition(r.Status.Conditions, swhv1alpha1.ConditionServiceSynced); {
	case c == nil:
		e.ServiceSynced = "Unknown"
	case c.Status == metav1.ConditionTrue:
		e.ServiceSynced = "True"
	default:
		e.ServiceSynced = c.Reason
	}
	return e
}

func writeListTable(w io.Writer, list StatusList, opts tableOptions, allNamespaces bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	columns := []string{"NAME", "READY", "PORTS", "SERVICE", "AGE"}
	if allNamespaces {
		columns = append([]string{"NAMESPACE"}, columns...)
	}
	if opts.wide {
		columns = append(columns, "TYPE", "CLUSTER-IP")
	}
	if !opts.noHeaders {
		fmt.Fprintln(tw, strings.Join(columns, "\t"))
	}
	for _, e := range list.Items {
		var ports []string
		for _, p := range e.Ports {
			ports = append(ports, fmt.Sprintf("%s %d/%d", endpoints.PortLabel(p.Name, p.Port), p.Ready, p.Total))
		}
		row := []string{e.Name, dash(e.Ready), dash(strings.Join(ports, ", ")), e.ServiceSynced, humanDuration(now.Sub(e.Created.Time))}
		if allNamespaces {
			row = append([]string{e.Namespace}, row...)
		}
		if opts.wide {
			row = append(row, e.Type, dash(e.ClusterIP))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// printList prints the list through a cli-runtime printer as a list of
// objects (kind StatusListEntry, each named after its resource), which
// every printer takes, -o name included.
func printList(p printers.ResourcePrinter, w io.Writer, list StatusList) error {
	out := &unstructured.UnstructuredList{Object: map[string]any{}}
	out.SetAPIVersion(OutputGroupVersion)
	out.SetKind("StatusList")
	for _, e := range list.Items {
		obj, err := asObject("StatusListEntry", e.Namespace, e.Name, e)
		if err != nil {
			return err
		}
		out.Items = append(out.Items, *obj)
	}
	return p.PrintObj(out, w)
}
