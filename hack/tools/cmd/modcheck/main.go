// Command modcheck enforces the module rules of docs/design.md across the
// repository: the dependency direction between swh modules, the short list
// of what each library module may require, and one version of every
// dependency shared by two product modules. It also checks that versions.yaml
// lists every go.mod, go.work and a rule here, and nothing more.
//
// usage: go run ./cmd/modcheck REPO_ROOT   (from hack/tools)
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

const prefix = "github.com/swh-dev/swh/"

// rule says what one module may depend on.
type rule struct {
	dir string
	// direct lists the only modules its go.mod may require directly (nil: any).
	direct []string
	// forbidden lists module path prefixes that no package it builds may come from.
	forbidden []string
	// ownVersions leaves its requirements out of the shared-version check.
	ownVersions bool
}

func rules() []rule {
	swh := func(names ...string) []string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = prefix + n
		}
		return out
	}
	return []rule{
		{dir: "api", direct: []string{"k8s.io/api", "k8s.io/apimachinery"},
			forbidden: append(swh("probes", "endpoints", "controller", "agent", "test"), "sigs.k8s.io/controller-runtime", "k8s.io/client-go")},
		// Each protocol's dependency is chosen on purpose and lives in its
		// subpackage: lib/pq (probes/postgresql), the MySQL driver
		// (probes/mysql); gRPC and Redis are spoken by the library itself.
		{dir: "probes", direct: []string{"github.com/lib/pq", "github.com/go-sql-driver/mysql", "go.uber.org/goleak"},
			forbidden: append(swh("api", "endpoints", "controller", "agent", "test"), "k8s.io/", "sigs.k8s.io/")},
		{dir: "endpoints", direct: []string{"k8s.io/api", "k8s.io/apimachinery"},
			forbidden: append(swh("api", "probes", "controller", "agent", "test"), "sigs.k8s.io/controller-runtime", "k8s.io/client-go")},
		{dir: "controller", forbidden: swh("probes", "agent", "test")},
		{dir: "agent", forbidden: swh("controller", "test")},
		{dir: "test"},
		// Pinned to what kubelet's probers and the upstream tools need.
		{dir: "test/peers", ownVersions: true},
		{dir: "hack/tools", ownVersions: true},
	}
}

type goMod struct {
	Module  struct{ Path string }
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
}

func readGoMod(dir string) (*goMod, error) {
	out, err := run(dir, nil, "go", "mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	m := &goMod{}
	if err := json.Unmarshal(out, m); err != nil {
		return nil, fmt.Errorf("decoding %s/go.mod: %w", dir, err)
	}
	return m, nil
}

func run(dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s in %s: %w\n%s", name, strings.Join(args, " "), dir, err, stderr.String())
	}
	return out, nil
}

func checkModule(root string, r rule, mod *goMod) []string {
	var problems []string
	dir := filepath.Join(root, r.dir)
	if r.direct != nil {
		for _, req := range mod.Require {
			if req.Indirect || contains(r.direct, req.Path) {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s/go.mod requires %s directly; it may require only %s", r.dir, req.Path, strings.Join(r.direct, ", ")))
		}
	}
	if len(r.forbidden) == 0 {
		return problems
	}
	// Module-less packages are the standard library.
	out, err := run(dir, nil, "go", "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "./...")
	if err != nil {
		return append(problems, err.Error())
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, module, _ := strings.Cut(line, " ")
		if module == "" || module == mod.Module.Path {
			continue
		}
		for _, f := range r.forbidden {
			if strings.HasPrefix(module, f) && !seen[module] {
				seen[module] = true
				problems = append(problems, fmt.Sprintf("%s builds %s from %s, which the module rules forbid (docs/design.md#modules)", r.dir, pkg, module))
			}
		}
	}
	return problems
}

// checkVersions reports dependencies that two product modules require at
// different versions.
func checkVersions(mods map[string]*goMod, own map[string]bool) []string {
	versions := map[string]map[string][]string{} // path -> version -> modules
	for dir, m := range mods {
		if own[dir] {
			continue
		}
		for _, req := range m.Require {
			if strings.HasPrefix(req.Path, prefix) {
				continue
			}
			if versions[req.Path] == nil {
				versions[req.Path] = map[string][]string{}
			}
			versions[req.Path][req.Version] = append(versions[req.Path][req.Version], dir)
		}
	}
	var problems []string
	for path, byVersion := range versions {
		if len(byVersion) < 2 {
			continue
		}
		var parts []string
		for v, dirs := range byVersion {
			sort.Strings(dirs)
			parts = append(parts, fmt.Sprintf("%s in %s", v, strings.Join(dirs, ", ")))
		}
		sort.Strings(parts)
		problems = append(problems, fmt.Sprintf("%s is required at different versions: %s (go get the newest of them in each module, GOWORK=off)", path, strings.Join(parts, "; ")))
	}
	return problems
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: modcheck REPO_ROOT")
		os.Exit(2)
	}
	root := os.Args[1]
	versions, listed, problems := readVersions(root)
	if versions != nil {
		problems = append(problems, checkChart(root, versions)...)
	}
	byDir := map[string]rule{}
	var ruleDirs []string
	for _, r := range rules() {
		byDir[r.dir] = r
		ruleDirs = append(ruleDirs, r.dir)
	}
	problems = append(problems, checkListed(root, listed, ruleDirs)...)
	mods := map[string]*goMod{}
	own := map[string]bool{}
	for _, dir := range listed {
		r, ok := byDir[dir]
		if !ok {
			continue // checkListed reported it
		}
		own[dir] = r.ownVersions
		mod, err := readGoMod(filepath.Join(root, r.dir))
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if want := prefix + r.dir; mod.Module.Path != want {
			problems = append(problems, fmt.Sprintf("%s/go.mod declares module %s, want %s", r.dir, mod.Module.Path, want))
		}
		mods[r.dir] = mod
		problems = append(problems, checkModule(root, r, mod)...)
	}
	problems = append(problems, checkVersions(mods, own)...)
	if versions != nil {
		problems = append(problems, checkSiblings(versions, mods)...)
	}
	sort.Strings(problems)
	for _, p := range problems {
		fmt.Println("modcheck:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Printf("modcheck: versions.yaml lists the %d modules; they follow the dependency rules\n", len(mods))
}
