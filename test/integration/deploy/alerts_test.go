package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/swh-dev/swh/test/harness"
)

// promtoolTests is what TestAlertRules reads of a promtool test file: which
// alerts each case expects to fire and which to stay silent.
type promtoolTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestAlertRules renders the chart's PrometheusRule, with the default
// values and with fullnameOverride, and runs promtool on each rendering:
// `check rules --lint=all`, then the unit tests of testdata/alerts, which
// give each alert input series and say when it fires, with which labels
// and annotations, and when it stays silent. Every alert the chart renders
// must have a case of each kind. Needs bin/helm and bin/promtool.
func TestAlertRules(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	promtool := filepath.Join(root, "bin", "promtool")
	if _, err := os.Stat(promtool); err != nil {
		harness.Unavailable(t, fmt.Errorf("bin/promtool (hack/build-tools.sh promtool, run by make test, builds it): %w", harness.ErrMissingDependency))
	}
	for _, tc := range []struct {
		name, release, namespace, set, tests string
		// everyAlert: the test file covers every alert, firing and silent.
		everyAlert bool
	}{
		{name: "defaults", release: "swh", namespace: "swh-system", set: "prometheusRule.enabled=true", tests: "default.yaml", everyAlert: true},
		{name: "fullnameOverride", release: "db", namespace: "routing", set: "prometheusRule.enabled=true,fullnameOverride=db-routing", tests: "fullname-override.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderChart(t, tc.release, tc.namespace, tc.set)
			var rule *unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() == "PrometheusRule" {
					rule = o
				}
			}
			if rule == nil {
				t.Fatal("the chart rendered no PrometheusRule")
			}
			groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
			rules, err := yaml.Marshal(map[string]any{"groups": groups})
			if err != nil {
				t.Fatal(err)
			}
			testFile, err := os.ReadFile(filepath.Join("testdata", "alerts", tc.tests))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			for name, data := range map[string][]byte{"rules.yaml": rules, tc.tests: testFile} {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, args := range [][]string{{"check", "rules", "--lint=all", "rules.yaml"}, {"test", "rules", tc.tests}} {
				cmd := exec.Command(promtool, args...)
				cmd.Dir = dir
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Run(); err != nil {
					t.Errorf("promtool %v: %v\n%s", args, err, out.String())
				}
			}
			if tc.everyAlert {
				checkEveryAlertTested(t, alertRules(t, groups), testFile)
			}
		})
	}
}

// checkEveryAlertTested fails for each rule the test file never expects to
// fire, or never expects to stay silent.
func checkEveryAlertTested(t *testing.T, rules []map[string]any, testFile []byte) {
	t.Helper()
	var tests promtoolTests
	if err := yaml.Unmarshal(testFile, &tests); err != nil {
		t.Fatal(err)
	}
	var fires, silent []string
	for _, tc := range tests.Tests {
		for _, c := range tc.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				fires = append(fires, c.Alertname)
			} else {
				silent = append(silent, c.Alertname)
			}
		}
	}
	for _, r := range rules {
		name := r["alert"].(string)
		if !slices.Contains(fires, name) {
			t.Errorf("no promtool test expects %s to fire", name)
		}
		if !slices.Contains(silent, name) {
			t.Errorf("no promtool test expects %s to stay silent", name)
		}
		annotations, _ := r["annotations"].(map[string]any)
		for _, key := range []string{"summary", "description", "runbook_url"} {
			if annotations[key] == nil {
				t.Errorf("alert %s has no %s", name, key)
			}
		}
	}
}
