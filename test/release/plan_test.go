// Package release_test checks the release tooling: make release-plan names
// every module of a set, the tags and go.mod bumps a release makes, and
// writes nothing. It needs no cluster.
package release_test

import (
	"crypto/sha256"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// root is the repository, seen from test/release.
const root = "../.."

const prefix = "github.com/swh-dev/swh/"

// A version no module will have been tagged at, so the plan has no clash.
const version = "v0.99.0"

type versionsFile struct {
	ModuleSets map[string]struct {
		Modules []string `json:"modules"`
	} `json:"module-sets"`
	ExcludedModules []string `json:"excluded-modules"`
}

func readVersions(t *testing.T) versionsFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "versions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v versionsFile
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("versions.yaml: %v", err)
	}
	return v
}

// requires returns the requirements of a module's go.mod, by module path.
func requires(t *testing.T, dir string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = filepath.Join(root, dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	var mod struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	reqs := map[string]string{}
	for _, r := range mod.Require {
		reqs[r.Path] = r.Version
	}
	return reqs
}

func plan(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"hack/release-plan.sh"}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fingerprint hashes the files a release edits and lists the tags, to show
// that a dry run changes neither.
func fingerprint(t *testing.T, dirs []string) string {
	t.Helper()
	h := sha256.New()
	files := []string{"versions.yaml", "CHANGELOG.md", "deploy/charts/swh/Chart.yaml"}
	for _, d := range dirs {
		files = append(files, d+"/go.mod", d+"/CHANGELOG.md")
	}
	for _, f := range files {
		data, _ := os.ReadFile(filepath.Join(root, f)) // a missing file hashes as empty
		h.Write([]byte(f))
		h.Write(data)
	}
	tags, err := exec.Command("git", "-C", root, "tag", "-l").Output()
	if err != nil {
		t.Fatalf("git tag -l: %v", err)
	}
	h.Write(tags)
	return string(h.Sum(nil))
}

// TestReleasePlan: for each module set, the plan names a path-prefixed tag
// per module and every go.mod requirement of those modules it would raise,
// and it writes nothing.
func TestReleasePlan(t *testing.T) {
	v := readVersions(t)
	var all []string
	for _, set := range v.ModuleSets {
		for _, m := range set.Modules {
			all = append(all, strings.TrimPrefix(m, prefix))
		}
	}
	for _, m := range v.ExcludedModules {
		all = append(all, strings.TrimPrefix(m, prefix))
	}
	sort.Strings(all)
	libraries := v.ModuleSets["libraries"].Modules
	if len(libraries) < 3 {
		t.Fatalf("versions.yaml lists %d library modules, want api, probes and endpoints at least", len(libraries))
	}

	for name, set := range v.ModuleSets {
		t.Run(name, func(t *testing.T) {
			before := fingerprint(t, all)
			out, err := plan(t, version, name)
			if err != nil {
				t.Fatalf("release-plan %s %s: %v\n%s", version, name, err, out)
			}
			lines := map[string]bool{}
			for _, l := range strings.Split(out, "\n") {
				lines[strings.TrimSpace(l)] = true
			}
			released := map[string]bool{}
			for _, m := range set.Modules {
				released[m] = true
				if tag := strings.TrimPrefix(m, prefix) + "/" + version; !lines[tag] {
					t.Errorf("the plan does not name the tag %s of %s:\n%s", tag, m, out)
				}
			}
			bumps := 0
			for _, dir := range all {
				for path, old := range requires(t, dir) {
					if !released[path] {
						continue
					}
					bumps++
					want := dir + "/go.mod: require " + path + " " + old + " → " + version
					if !lines[want] {
						t.Errorf("the plan does not name the bump %q:\n%s", want, out)
					}
				}
			}
			if name == "libraries" && bumps == 0 {
				t.Errorf("no module requires a library module; the binaries should")
			}
			if after := fingerprint(t, all); after != before {
				t.Errorf("the dry run changed a go.mod, versions.yaml, a changelog, the chart or the tags")
			}
		})
	}
}

// TestReleasePlanRefuses: a version the go command would not map to a tag
// of these module paths is refused before anything is planned.
func TestReleasePlanRefuses(t *testing.T) {
	for _, tc := range []struct{ args []string }{
		{[]string{}},
		{[]string{"0.1.0"}},  // no v: the Makefile's chart default
		{[]string{"v0.1"}},   // not semver
		{[]string{"v2.0.0"}}, // needs /v2 module paths
		{[]string{version, "no-such-set"}},
	} {
		out, err := plan(t, tc.args...)
		if err == nil {
			t.Errorf("release-plan %v succeeded, want a refusal:\n%s", tc.args, out)
		} else if strings.Contains(out, "tags to create") {
			t.Errorf("release-plan %v planned before refusing:\n%s", tc.args, out)
		}
	}
}
