package kubectlswh

import (
	"bytes"
	"strings"
	"testing"
	"time"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

func TestWriteHistory(t *testing.T) {
	at := time.Date(2026, 12, 6, 20, 2, 48, 0, time.UTC)
	until := at.Add(4 * time.Second)
	for _, tc := range []struct {
		name   string
		report HistoryReport
		want   []string
	}{
		{
			name: "a damped target and an agent that could not be asked",
			report: HistoryReport{Namespace: "shop", Name: "web", Targets: []NodeTarget{{Node: "n1", TargetHistory: swhv1alpha1.TargetHistory{
				Pod: "web-0", Probe: 1, Ejections: 2, Transitions: []swhv1alpha1.TargetTransition{
					{At: at, Event: swhv1alpha1.TransitionWithdrawn, Reason: "http-status", Ejections: 2, OutUntil: &until},
				}}}}, Errors: map[string]string{"n2": "no agent pod runs on the node"}},
			want: []string{
				"POD    PROBE  NODE  PUBLISHED  EJECTIONS",
				"web-0  1      n1    out        2",
				"  2026-12-06T20:02:48Z withdrawn (http-status), out until 2026-12-06T20:02:52Z (ejection 2 in a row)",
				"node n2: no agent pod runs on the node",
			},
		},
		{name: "nothing remembered", report: HistoryReport{Namespace: "shop", Name: "web"}, want: []string{"no agent remembers a target of shop/web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeHistory(&b, tc.report, false); err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimRight(b.String(), "\n"); got != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", got, strings.Join(tc.want, "\n"))
			}
		})
	}
}
