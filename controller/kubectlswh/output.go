package kubectlswh

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// tableOptions shape the text tables: -o wide adds columns, --no-headers
// drops the header line (and the summary above the table, which is not a
// row).
type tableOptions struct {
	wide, noHeaders bool
}

// writeStatusTable prints st as text: the summary, a row per pod and port,
// and the nodes' problems.
func writeStatusTable(w io.Writer, st Status, opts tableOptions, now time.Time) error {
	if !opts.noHeaders {
		fmt.Fprintln(w, st.Summary)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !opts.noHeaders {
		header := "PORT\tPOD\tNODE\tSTATE\tREASON\tPROBE\tAGE\tMESSAGE"
		if opts.wide {
			header = "PORT\tPOD\tNODE\tSTATE\tREASON\tPROBE\tAGE\tADDRESSES\tPOD-PORT\tMESSAGE"
		}
		fmt.Fprintln(tw, header)
	}
	for _, p := range st.Ports {
		for _, ep := range p.Endpoints {
			var reason, probe, since, message string
			if r := ep.Reason; r != nil {
				reason, message, since = r.Reason, r.Message, age(r.Since, now)
				if r.Probe != nil {
					probe = fmt.Sprintf("%d", *r.Probe)
					if r.ProbeName != "" {
						probe += " (" + r.ProbeName + ")"
					}
				}
			}
			if opts.wide {
				podPort := ""
				if ep.PodPort != 0 {
					podPort = fmt.Sprint(ep.PodPort)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", portName(p), ep.Pod, dash(ep.Node), stateColumn(ep), dash(reason), dash(probe), dash(since),
					dash(strings.Join(ep.Addresses, ",")), dash(podPort), message)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", portName(p), ep.Pod, dash(ep.Node), stateColumn(ep), dash(reason), dash(probe), dash(since), message)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if opts.noHeaders {
		return nil // rows only, for scripts
	}
	for _, p := range st.Ports {
		if p.Exclusive {
			fmt.Fprintf(w, "port %s is exclusive: held by %s\n", portName(p), dashNone(p.Holder))
		}
	}
	for _, n := range st.Nodes {
		if n.Note != "" {
			fmt.Fprintf(w, "node %s: %s\n", n.Name, n.Note)
		}
	}
	return nil
}

func portName(p PortStatus) string {
	if p.Name == "" {
		return fmt.Sprintf("%d", p.Port)
	}
	return p.Name
}

// state renders an endpoint's conditions in one word or two.
func state(ep EndpointStatus) string {
	var s string
	switch {
	case !ep.Published:
		s = "not published"
	case ep.Ready && ep.Terminating:
		s = "ready,terminating"
	case ep.Ready && !ep.Serving:
		// publishNotReadyAddresses: ready whatever the probes say.
		s = "ready,not serving"
	case ep.Ready:
		s = "ready"
	case ep.Serving && ep.Terminating:
		s = "serving,terminating"
	case ep.Terminating:
		s = "not serving,terminating"
	default:
		s = "not ready"
	}
	return s
}

// stateColumn is state with the staleness of an endpoint whose agent is
// not running.
func stateColumn(ep EndpointStatus) string {
	if ep.Stale {
		return state(ep) + " (stale)"
	}
	return state(ep)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func humanDuration(d time.Duration) string { return duration.HumanDuration(d) }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// sentence capitalises the first letter and ends with a full stop.
func sentence(s string) string {
	if s == "" {
		return s
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// dashNone is s, or "no pod" when it is empty.
func dashNone(s string) string {
	if s == "" {
		return "no pod"
	}
	return s
}
