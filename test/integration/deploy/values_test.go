package deploy_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/swh-dev/swh/test/harness"
)

// TestValuesDocumented fails when a value of the chart's values.yaml has no
// row in the values table of its README.md (a row for a map documents the
// values under it).
func TestValuesDocumented(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, "deploy", "charts", "swh")
	raw, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	if err := utilyaml.Unmarshal(raw, &values); err != nil {
		t.Fatalf("parsing values.yaml: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join(chart, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			if key, _, ok := strings.Cut(rest, "`"); ok {
				documented[key] = true
			}
		}
	}
	var missing []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			key := prefix + k
			if documented[key] {
				continue
			}
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				walk(key+".", sub)
				continue
			}
			missing = append(missing, key)
		}
	}
	walk("", values)
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("values missing from the table of deploy/charts/swh/README.md: %s", strings.Join(missing, ", "))
	}
}
