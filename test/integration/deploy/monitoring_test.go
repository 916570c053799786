package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/swh-dev/swh/test/harness"
)

// promDuration is a Prometheus duration, as a rule's for.
var promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

// alertRules returns the rules of a PrometheusRule's spec, checking their
// shape as the operator's CRD would (alert, expr, for, labels,
// annotations), with a severity and a summary each.
func alertRules(t *testing.T, groups []any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, g := range groups {
		group, _ := g.(map[string]any)
		rules, _ := group["rules"].([]any)
		if group["name"] == "" || len(rules) == 0 {
			t.Errorf("group %v: want a name and rules", group)
		}
		for _, r := range rules {
			rule, _ := r.(map[string]any)
			alert, _ := rule["alert"].(string)
			expr, _ := rule["expr"].(string)
			forDur, _ := rule["for"].(string)
			labels, _ := rule["labels"].(map[string]any)
			annotations, _ := rule["annotations"].(map[string]any)
			if alert == "" || strings.TrimSpace(expr) == "" || !promDuration.MatchString(forDur) ||
				labels["severity"] == nil || annotations["summary"] == nil {
				t.Errorf("rule %v: want an alert, an expr, a for duration, a severity and a summary", rule)
			}
			out = append(out, rule)
		}
	}
	return out
}

// dashboardPanel is what the test reads of a Grafana panel.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type dashboard struct {
	UID        string           `json:"uid"`
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// dashboardOf parses the dashboard of the chart's ConfigMap and checks that
// each panel has a title and queries.
func dashboardOf(t *testing.T, cm *unstructured.Unstructured) dashboard {
	t.Helper()
	raw, _, _ := unstructured.NestedString(cm.Object, "data", "swh.json")
	var d dashboard
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if d.UID == "" || len(d.Panels) < 5 {
		t.Errorf("dashboard uid %q with %d panels, want a uid and the 5 panels", d.UID, len(d.Panels))
	}
	for _, p := range d.Panels {
		if p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q has %d targets, want a title and a target", p.Title, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has a target with no expr", p.Title)
			}
		}
	}
	return d
}

// TestMonitoringChart renders the chart with its PrometheusRule and
// dashboard on, and checks what they hold: the values reach them, the rules
// are well formed, the dashboard parses and every panel queries something.
// The dashboard's ConfigMap is applied with a server-side dry-run; the
// PrometheusRule's CRD is not installed. Needs bin/helm.
func TestMonitoringChart(t *testing.T) {
	grafanaNS := controlPlane.CleanNamespace(t)
	objs := renderChart(t, "other", "swh-mon", strings.Join([]string{
		"prometheusRule.enabled=true", "prometheusRule.labels.release=prom", "prometheusRule.namespace=monitoring",
		"prometheusRule.alertLabels.team=net", "prometheusRule.alertLabels.severity=ignored",
		`monitoring.agentSelector=job="my-agents"\,cluster="a"`, `monitoring.controllerSelector=job="my-ctrl"`,
		"grafanaDashboard.enabled=true", "grafanaDashboard.namespace=" + grafanaNS,
		"grafanaDashboard.label=dashboards", "grafanaDashboard.labelValue=swh",
		"grafanaDashboard.annotations.grafana_folder=Network",
	}, ","))

	pr := find(t, objs, "PrometheusRule", "other-swh")
	if pr.GetNamespace() != "monitoring" || pr.GetLabels()["release"] != "prom" || pr.GetLabels()["app.kubernetes.io/instance"] != "other" {
		t.Errorf("PrometheusRule in %q labelled %v: want namespace monitoring, the chart's labels and release=prom", pr.GetNamespace(), pr.GetLabels())
	}
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	exprs := map[string]string{}
	for _, rule := range alertRules(t, groups) {
		name := rule["alert"].(string)
		if _, dup := exprs[name]; dup {
			t.Errorf("alert %s twice", name)
		}
		exprs[name] = rule["expr"].(string)
		labels := rule["labels"].(map[string]any)
		if labels["team"] != "net" || labels["severity"] == "ignored" {
			t.Errorf("alert %s labelled %v: want team=net from alertLabels, and its own severity", name, labels)
		}
	}
	for alert, want := range map[string]string{"SwhAgentDown": `up{job="my-agents",cluster="a"}`, "SwhControllerDown": `up{job="my-ctrl"}`} {
		if !strings.Contains(exprs[alert], want) {
			t.Errorf("%s: expr %q does not select %s", alert, exprs[alert], want)
		}
	}

	cm := find(t, objs, "ConfigMap", "other-swh-dashboard")
	if cm.GetNamespace() != grafanaNS || cm.GetLabels()["dashboards"] != "swh" || cm.GetAnnotations()["grafana_folder"] != "Network" {
		t.Errorf("dashboard ConfigMap in %q, labels %v, annotations %v: want %s, dashboards=swh, the folder annotation",
			cm.GetNamespace(), cm.GetLabels(), cm.GetAnnotations(), grafanaNS)
	}
	d := dashboardOf(t, cm)
	up := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if strings.Contains(tg.Expr, `up{job="my-agents",cluster="a"}`) {
				up++
			}
		}
	}
	if up == 0 {
		t.Error("no dashboard target selects up with monitoring.agentSelector")
	}

	// Off by default: the plain manifests hold neither.
	if n := len(harness.OfKind(manifests(t), "PrometheusRule")); n != 0 {
		t.Errorf("the default manifests hold %d PrometheusRules", n)
	}
	if n := len(harness.OfKind(renderChart(t, "other", "swh-mon", ""), "PrometheusRule", "ConfigMap")); n != 0 {
		t.Errorf("the chart's defaults render %d PrometheusRules or ConfigMaps, want none", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, w := warningClient(t)
	if err := apply(ctx, c, []*unstructured.Unstructured{cm}, true); err != nil {
		t.Errorf("server-side dry-run of the dashboard's ConfigMap: %v", err)
	}
	if len(w.seen) > 0 {
		t.Errorf("the API server warned:\n%s", strings.Join(w.seen, "\n"))
	}
}

// TestMonitoringMetricsExist fails when an alert of the PrometheusRule, a
// panel or a variable of the dashboard names a metric the binaries do not
// export: a renamed metric must not leave a silent alert or an empty panel.
func TestMonitoringMetricsExist(t *testing.T) {
	objs := renderChart(t, "swh", "swh-system", "prometheusRule.enabled=true,grafanaDashboard.enabled=true")
	exported := binaryMetrics(t)

	// The standard names stand in for metrics the test cannot record: each
	// must be one the docs promise.
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range standardMetrics {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if name != "up" && !strings.Contains(string(ops), "`"+base) {
			t.Errorf("standardMetrics holds %s, which docs/operations.md does not list", name)
		}
	}

	queries := map[string]string{} // where -> expression
	groups, _, _ := unstructured.NestedSlice(find(t, objs, "PrometheusRule", "swh").Object, "spec", "groups")
	for _, rule := range alertRules(t, groups) {
		queries["alert "+rule["alert"].(string)] = rule["expr"].(string)
	}
	d := dashboardOf(t, find(t, objs, "ConfigMap", "swh-dashboard"))
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			queries[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		switch q := v.Query.(type) {
		case string:
			if strings.Contains(q, "(") {
				queries["variable "+v.Name] = q
			}
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				queries["variable "+v.Name] = s
			}
		}
	}
	for where, expr := range queries {
		names := promqlMetrics(expr)
		if len(names) == 0 {
			t.Errorf("%s: found no metric in %q", where, expr)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s uses metric %s, which neither binary exports (expr %q)", where, n, expr)
			}
		}
	}
}

// TestAlertsDocumented: the rules docs/alerts.md shows under "Rules" are the
// chart's PrometheusRule, as rendered with the defaults, so the two cannot
// drift apart; each alert has a runbook there, where its runbook_url points.
func TestAlertsDocumented(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(page), "\n## Rules\n")
	if start < 0 {
		t.Fatal(`docs/alerts.md has no "## Rules" section`)
	}
	section, _, _ := strings.Cut(string(page[start+1:]), "\n## ")
	block := regexp.MustCompile("(?s)```yaml\n(groups:\n.*?)```").FindStringSubmatch(section)
	if block == nil {
		t.Fatal(`docs/alerts.md has no "groups:" YAML block under "## Rules"`)
	}
	var doc struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.Unmarshal([]byte(block[1]), &doc); err != nil {
		t.Fatalf("the documented rules are not YAML: %v", err)
	}
	objs := renderChart(t, "swh", "swh-system", "prometheusRule.enabled=true")
	chart, _, _ := unstructured.NestedSlice(find(t, objs, "PrometheusRule", "swh").Object, "spec", "groups")

	docRules, chartRules := alertRules(t, doc.Groups), alertRules(t, chart)
	byName := map[string]map[string]any{}
	for _, r := range chartRules {
		byName[r["alert"].(string)] = r
	}
	var docNames, chartNames []string
	for _, r := range docRules {
		name := r["alert"].(string)
		docNames = append(docNames, name)
		if want, ok := byName[name]; ok && !reflect.DeepEqual(r, want) {
			t.Errorf("alert %s differs:\ndocs:  %v\nchart: %v", name, r, want)
		}
	}
	for _, r := range chartRules {
		chartNames = append(chartNames, r["alert"].(string))
	}
	if !reflect.DeepEqual(docNames, chartNames) {
		t.Errorf("docs/alerts.md shows the alerts %v, the chart renders %v", docNames, chartNames)
	}
	for _, name := range chartNames {
		if !strings.Contains(string(page), "\n### "+name+"\n") {
			t.Errorf("docs/alerts.md has no runbook (### %s) for the alert", name)
		}
		url, _ := byName[name]["annotations"].(map[string]any)["runbook_url"].(string)
		if want := "/docs/alerts.md#" + strings.ToLower(name); !strings.HasSuffix(url, want) {
			t.Errorf("alert %s: runbook_url %q, want it to end in %s", name, url, want)
		}
	}
	if !reflect.DeepEqual(doc.Groups, chart) {
		t.Error("the documented groups differ from the chart's (names, intervals or fields)")
	}
}
