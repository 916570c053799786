package release_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
	"sigs.k8s.io/yaml"
)

// setVersions reads the version of each module set from versions.yaml: the
// version its modules are tagged at next, and the one the binaries require.
func setVersions(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "versions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		ModuleSets map[string]struct {
			Version string   `json:"version"`
			Modules []string `json:"modules"`
		} `json:"module-sets"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("versions.yaml: %v", err)
	}
	out := map[string]string{}
	for _, set := range v.ModuleSets {
		for _, m := range set.Modules {
			out[m] = set.Version
		}
	}
	return out
}

// publish writes module path at version into a file-system module proxy
// (the layout GOPROXY=file:// reads: <path>/@v/{list,<v>.info,<v>.mod,<v>.zip}),
// from dir as it is in the working tree, with goMod as its go.mod.
func publish(t *testing.T, proxy, path, version, dir string, goMod []byte) {
	t.Helper()
	at := filepath.Join(proxy, filepath.FromSlash(path), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The zip's go.mod is the one given: copy the module and overwrite it.
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), goMod, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := zip.CreateFromDir(f, module.Version{Path: path, Version: version}, src); err != nil {
		t.Fatalf("zip of %s@%s: %v", path, version, err)
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339))
	for name, data := range map[string][]byte{
		version + ".info": []byte(info),
		version + ".mod":  goMod,
		"list":            []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// outsideEnv is the environment of a user outside the repository: no
// workspace; swh modules only from the proxy; third-party modules only
// from the machine's module cache (itself a file proxy): no network, so it
// runs in the test network namespace, and never a VCS. A private module cache, so a fake version never lands in
// the real one, and -trimpath, so the build cache is shared anyway.
func outsideEnv(t *testing.T, proxy string) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	cache := strings.TrimSpace(string(out))
	return append(os.Environ(),
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(cache, "cache", "download"),
		"GOPRIVATE=", "GONOPROXY=", "GONOSUMDB=", "GOINSECURE=",
		// The fake versions are in no checksum database; third-party sums
		// come from the repository's go.sum files copied in.
		"GOSUMDB=off",
		"GOMODCACHE="+filepath.Join(t.TempDir(), "modcache"),
	)
}

func goRun(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// sums concatenates the go.sum files of modules, for the outside module.
func sums(t *testing.T, dirs ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(root, d, "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.Bytes()
}

func readGoMod(t *testing.T, dir string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestOutsideUser publishes the library modules and the binaries, as they
// are in the working tree, at the versions versions.yaml gives their sets,
// to a module proxy in a temporary folder; then a module outside the
// repository, with no workspace, gets probes and endpoints from it as
// `go get …@version` would, and `go install` builds the agent at its
// version. Their go.mod requirements must name versions that exist, and a
// released module must not need a replace directive, since the go command
// ignores those of a dependency and refuses go install with any.
func TestOutsideUser(t *testing.T) {
	versions := setVersions(t)
	proxy := t.TempDir()
	for path, v := range versions {
		dir := strings.TrimPrefix(path, prefix)
		goMod := readGoMod(t, dir)
		if dir == "agent" || dir == "controller" {
			// The binaries are tagged at a commit without their replace
			// directives (VERSIONING.md; make release-plan SET=binaries).
			goMod = dropReplaces(t, dir)
		}
		publish(t, proxy, path, v, filepath.Join(root, dir), goMod)
	}
	env := outsideEnv(t, proxy)

	t.Run("libraries", func(t *testing.T) {
		user := t.TempDir()
		files := map[string]string{
			"go.mod": "module example.com/outside\n\ngo 1.26.0\n",
			"main.go": `// Command outside uses the swh libraries as another project would.
package main

import (
	"fmt"

	v1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

func main() {
	name, err := endpoints.SliceName(endpoints.NameParts{})
	fmt.Println(probes.DefaultTimeout, name, err, v1alpha1.GroupVersion)
}
`,
		}
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(user, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(user, "go.sum"), sums(t, "api", "probes", "endpoints"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"probes", "endpoints", "api"} {
			goRun(t, user, env, "get", prefix+m+"@"+versions[prefix+m])
		}
		goRun(t, user, env, "build", "./...")
		goRun(t, user, env, "vet", "./...")

		// The swh modules came from the proxy, not from the repository.
		// Only these: listing all would ask for every module's .info,
		// which the module cache may lack for modules it only read go.mod of.
		out := goRun(t, user, env, "list", "-m", "-json", prefix+"api", prefix+"probes", prefix+"endpoints")
		cache := envValue(env, "GOMODCACHE")
		dec := json.NewDecoder(strings.NewReader(out))
		seen := 0
		for dec.More() {
			var m struct{ Path, Version, Dir string }
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(m.Path, prefix) {
				continue
			}
			seen++
			want := filepath.Join(cache, filepath.FromSlash(m.Path)+"@"+versions[m.Path])
			if m.Version != versions[m.Path] || m.Dir != want {
				t.Errorf("%s: version %s in %s, want %s from the proxy in %s", m.Path, m.Version, m.Dir, versions[m.Path], want)
			}
		}
		if seen != 3 {
			t.Errorf("the outside module uses %d swh modules, want api, probes and endpoints:\n%s", seen, out)
		}
	})

	t.Run("go install agent", func(t *testing.T) {
		bin := t.TempDir()
		path := prefix + "agent"
		goRun(t, t.TempDir(), append(env, "GOBIN="+bin, "GOFLAGS=-modcacherw -trimpath"),
			"install", path+"/cmd/swh-agent@"+versions[path])
		if _, err := os.Stat(filepath.Join(bin, "swh-agent")); err != nil {
			t.Fatal(err)
		}
	})
}

// dropReplaces returns a module's go.mod without its replace directives of
// swh modules, as the release commit of the binaries has it.
func dropReplaces(t *testing.T, dir string) []byte {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "go.mod")
	if err := os.WriteFile(tmp, readGoMod(t, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	var mod struct {
		Replace []struct{ Old struct{ Path string } }
	}
	out, err := exec.Command("go", "mod", "edit", "-json", tmp).Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	args := []string{"mod", "edit"}
	for _, r := range mod.Replace {
		if strings.HasPrefix(r.Old.Path, prefix) {
			args = append(args, "-dropreplace="+r.Old.Path)
		}
	}
	if out, err := exec.Command("go", append(args, tmp)...).CombinedOutput(); err != nil {
		t.Fatalf("go mod edit: %v\n%s", err, out)
	}
	data, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val // the last one wins, as for exec
		}
	}
	return v
}
