package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// versionsFile is versions.yaml: the modules and the versions they are
// released at, after opentelemetry-go's file of the same name.
type versionsFile struct {
	ModuleSets map[string]struct {
		Version string   `yaml:"version"`
		Chart   string   `yaml:"chart"`
		Modules []string `yaml:"modules"`
	} `yaml:"module-sets"`
	ExcludedModules []string `yaml:"excluded-modules"`
}

var semverRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// readVersions parses versions.yaml and returns it with the folders of its
// modules, sets first, and the problems of the file itself.
func readVersions(root string) (*versionsFile, []string, []string) {
	data, err := os.ReadFile(filepath.Join(root, "versions.yaml"))
	if err != nil {
		return nil, nil, []string{err.Error()}
	}
	v := &versionsFile{}
	if err := yaml.Unmarshal(data, v); err != nil {
		return nil, nil, []string{fmt.Sprintf("versions.yaml: %v", err)}
	}
	var problems []string
	seen := map[string]string{}
	add := func(where, path string) {
		if prev, ok := seen[path]; ok {
			problems = append(problems, fmt.Sprintf("versions.yaml lists %s twice (%s and %s)", path, prev, where))
		}
		seen[path] = where
		if !strings.HasPrefix(path, prefix) {
			problems = append(problems, fmt.Sprintf("versions.yaml: %s (%s) is not under %s", path, where, prefix))
		}
	}
	for name, set := range v.ModuleSets {
		if !semverRE.MatchString(set.Version) {
			problems = append(problems, fmt.Sprintf("versions.yaml: module set %s has version %q, want vMAJOR.MINOR.PATCH", name, set.Version))
		}
		for _, m := range set.Modules {
			add("module set "+name, m)
		}
	}
	for _, m := range v.ExcludedModules {
		add("excluded-modules", m)
	}
	// The folders in the file's order, which hack/modules.sh must match.
	var dirs []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "-" && strings.HasPrefix(f[1], prefix) {
			dirs = append(dirs, strings.TrimPrefix(f[1], prefix))
		}
	}
	if len(dirs) != len(seen) {
		problems = append(problems, fmt.Sprintf("versions.yaml: %d modules, %d lines \"- %s…\": keep one module per line (hack/modules.sh reads it line by line)", len(seen), len(dirs), prefix))
	}
	return v, dirs, problems
}

// goModDirs returns the folders under root that hold a go.mod, as the go
// command sees them (it ignores folders starting with . or _, and testdata).
func goModDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && name == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	return dirs, err
}

// checkListed reports go.mod files missing from versions.yaml and listed
// modules without one, the same for go.work's use directives and modcheck's
// rules, and a hack/modules.sh whose reading of versions.yaml differs.
func checkListed(root string, listed []string, ruleDirs []string) []string {
	var problems []string
	report := func(a, b []string, onlyA, onlyB string) {
		x, y := difference(a, b), difference(b, a)
		for _, d := range x {
			problems = append(problems, fmt.Sprintf(onlyA, d))
		}
		for _, d := range y {
			problems = append(problems, fmt.Sprintf(onlyB, d))
		}
	}
	found, err := goModDirs(root)
	if err != nil {
		return []string{err.Error()}
	}
	report(found, listed, "%s/go.mod is not in versions.yaml (add it to a module set or to excluded-modules)",
		"versions.yaml lists %s, which has no go.mod")
	report(ruleDirs, listed, "modcheck has a rule for %s, which versions.yaml does not list",
		"versions.yaml lists %s, which modcheck has no rule for (add one to rules() in hack/tools/cmd/modcheck)")

	out, err := run(root, nil, "go", "work", "edit", "-json")
	if err != nil {
		return append(problems, err.Error())
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		return append(problems, fmt.Sprintf("go.work: %v", err))
	}
	var used []string
	for _, u := range work.Use {
		used = append(used, filepath.ToSlash(filepath.Clean(u.DiskPath)))
	}
	report(used, listed, "go.work uses %s, which versions.yaml does not list",
		"versions.yaml lists %s, which go.work does not use (go work use)")

	out, err = run(root, nil, "bash", "hack/modules.sh", "list")
	if err != nil {
		return append(problems, err.Error())
	}
	if got := strings.Fields(string(out)); strings.Join(got, " ") != strings.Join(listed, " ") {
		problems = append(problems, fmt.Sprintf("hack/modules.sh list reads versions.yaml as %v, the YAML has %v (keep the file's plain layout)", got, listed))
	}
	return problems
}

// checkChart reports a chart whose version or appVersion is not its module
// set's version.
func checkChart(root string, v *versionsFile) []string {
	var problems []string
	for name, set := range v.ModuleSets {
		if set.Chart == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, set.Chart, "Chart.yaml"))
		if err != nil {
			problems = append(problems, fmt.Sprintf("versions.yaml: module set %s: %v", name, err))
			continue
		}
		var chart struct {
			Version    string `yaml:"version"`
			AppVersion string `yaml:"appVersion"`
		}
		if err := yaml.Unmarshal(data, &chart); err != nil {
			problems = append(problems, fmt.Sprintf("%s/Chart.yaml: %v", set.Chart, err))
			continue
		}
		want := strings.TrimPrefix(set.Version, "v")
		if chart.Version != want || chart.AppVersion != want {
			problems = append(problems, fmt.Sprintf("%s/Chart.yaml has version %q and appVersion %q; versions.yaml releases module set %s at %s (want %q for both)",
				set.Chart, chart.Version, chart.AppVersion, name, set.Version, want))
		}
	}
	return problems
}

// difference returns the elements of a that b lacks, in a's order.
func difference(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// checkSiblings reports a requirement of a module of this repository at
// another version than versions.yaml's for its set: the version about to be
// released, which the release plan raises everywhere at once (VERSIONING.md).
func checkSiblings(v *versionsFile, mods map[string]*goMod) []string {
	want := map[string]string{}
	for _, set := range v.ModuleSets {
		for _, m := range set.Modules {
			want[m] = set.Version
		}
	}
	var problems []string
	for dir, mod := range mods {
		for _, req := range mod.Require {
			if version, ok := want[req.Path]; ok && req.Version != version {
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s %s; versions.yaml releases it at %s, which every module must require (VERSIONING.md)", dir, req.Path, req.Version, version))
			}
		}
	}
	return problems
}
