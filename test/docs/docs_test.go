// Package docs_test keeps docs/ in step with the code: the names the
// documentation states (metrics, flags, reasons, event reasons, example
// files) must exist in the source, and the library snippets must be the
// Example functions they are copied from; and the repository must stand
// alone, pointing at no file a clone does not have. It needs no cluster.
package docs_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/swh-dev/swh/controller/kubectlswh"
)

// root is the repository, seen from test/docs.
const root = "../.."

func read(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// goSources returns the non-test Go files under the given folders.
func goSources(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[path] = string(data)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func matchesIn(re *regexp.Regexp, sources map[string]string, group int) map[string]bool {
	out := map[string]bool{}
	for _, src := range sources {
		for _, m := range re.FindAllStringSubmatch(src, -1) {
			out[m[group]] = true
		}
	}
	return out
}

func sorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestMetricNames: every swh_ metric the docs name is registered by the
// agent or the controller, and operations.md lists every one they register.
func TestMetricNames(t *testing.T) {
	// Metrics are registered by options (Name: "…") or, for collectors
	// that count when scraped, by their descriptions (NewDesc("…", …)).
	defined := matchesIn(regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(swh_[a-z0-9_]+)"`), goSources(t, "agent", "controller"), 1)
	if len(defined) < 9 {
		t.Fatalf("found only %d swh_ metrics in agent/ and controller/: %v", len(defined), sorted(defined))
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	mention := regexp.MustCompile(`\bswh_(?:agent|controller)_[a-z0-9_]+`)
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range mention.FindAllString(string(data), -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if trimmed := strings.TrimSuffix(name, suffix); trimmed != name && defined[trimmed] {
					base = trimmed
				}
			}
			if !defined[base] {
				t.Errorf("%s names metric %s, which neither the agent nor the controller registers", filepath.Base(doc), name)
			}
		}
	}
	ops := read(t, "docs/operations.md")
	for _, name := range sorted(defined) {
		if !strings.Contains(ops, "`"+name+"`") {
			t.Errorf("docs/operations.md does not list the metric %s", name)
		}
	}
}

// TestFlagsDocumented: operations.md lists every flag of both binaries.
func TestFlagsDocumented(t *testing.T) {
	flagRE := regexp.MustCompile(`fs\.[A-Za-z0-9]+\((?:&[^,]+,\s*)?"([a-z0-9-]+)"`)
	ops := read(t, "docs/operations.md")
	for _, main := range []string{"agent/cmd/swh-agent/main.go", "controller/cmd/swh-controller/main.go"} {
		flags := matchesIn(flagRE, map[string]string{main: read(t, main)}, 1)
		if len(flags) < 5 {
			t.Fatalf("found only %d flags in %s: %v", len(flags), main, sorted(flags))
		}
		for _, f := range sorted(flags) {
			if !strings.Contains(ops, "`--"+f+"`") {
				t.Errorf("docs/operations.md does not list the flag --%s of %s", f, main)
			}
		}
	}
}

// TestProbeReasonsDocumented: probes.md's table holds every reason a probe
// result can carry, from the library and from the agent, and kubectl swh
// why explains each.
func TestProbeReasonsDocumented(t *testing.T) {
	reasonRE := regexp.MustCompile(`Reason[A-Za-z]*\s+(?:probes\.)?Reason\s*=\s*"([a-z-]+)"`)
	reasons := matchesIn(reasonRE, goSources(t, "probes", "agent/publisher"), 1)
	if len(reasons) < 18 {
		t.Fatalf("found only %d reasons: %v", len(reasons), sorted(reasons))
	}
	doc := read(t, "docs/probes.md")
	for _, r := range sorted(reasons) {
		if r == "ok" {
			continue
		}
		if !strings.Contains(doc, "| `"+r+"` |") {
			t.Errorf("docs/probes.md has no row for the reason %q", r)
		}
		if kubectlswh.ReasonHint(r) == "" {
			t.Errorf("kubectl swh why has no hint for the reason %q (controller/kubectlswh/hints.go)", r)
		}
	}
}

// TestEventAndConditionReasonsDocumented: every event reason the binaries
// emit and every condition reason they set is in operations.md,
// concepts.md or disruptions.md. Both are constants of the api module's reasons.go, one
// vocabulary: an event recorded with a literal reason fails here.
func TestEventAndConditionReasonsDocumented(t *testing.T) {
	docs := read(t, "docs/operations.md") + read(t, "docs/concepts.md") + read(t, "docs/disruptions.md")
	var binaries strings.Builder
	for _, src := range goSources(t, "agent", "controller") {
		binaries.WriteString(src)
	}
	literal := regexp.MustCompile(`Eventf\([^,]+,\s*[^,]+,\s*corev1\.EventType[A-Za-z]+,\s*"([A-Za-z]+)"`)
	for _, m := range literal.FindAllStringSubmatch(binaries.String(), -1) {
		t.Errorf("an event recorded with the literal reason %q: declare it in api/v1alpha1/reasons.go", m[1])
	}
	// The reasons the binaries use (named other than where declared), of
	// the events and of the conditions (which are also the controller's
	// event reasons when a condition changes).
	declared := read(t, "api/v1alpha1/reasons.go")
	constRE := regexp.MustCompile(`(?m)^\s*((?:Event)?Reason[A-Za-z]+)\s*=\s*"([A-Za-z]+)"`)
	events, conditions := 0, 0
	for _, m := range constRE.FindAllStringSubmatch(declared, -1) {
		if !regexp.MustCompile(`\b` + m[1] + `\b`).MatchString(binaries.String()) {
			continue // declared, never used by a binary
		}
		if strings.HasPrefix(m[1], "Event") {
			events++
		} else {
			conditions++
		}
		if !strings.Contains(docs, "`"+m[2]+"`") {
			t.Errorf("the reason %s (%s) is not documented", m[2], m[1])
		}
	}
	if events < 7 || conditions < 6 {
		t.Errorf("found only %d event and %d condition reasons in use", events, conditions)
	}
}

// TestExamplesListed: docs/examples.md explains every manifest in
// docs/examples, and no page links to an example that does not exist.
func TestExamplesListed(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(root, "docs", "examples", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no docs/examples/*.yaml")
	}
	index := read(t, "docs/examples.md")
	for _, f := range files {
		if !strings.Contains(index, "(examples/"+filepath.Base(f)+")") {
			t.Errorf("docs/examples.md does not link examples/%s", filepath.Base(f))
		}
	}
}

// TestRelativeLinks: every relative link of docs/*.md points at a file that
// exists.
func TestRelativeLinks(t *testing.T) {
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(data)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", filepath.Base(doc), m[1])
			}
		}
	}
}

var (
	fencedBlock = regexp.MustCompile("(?ms)^```.*?^```")
	inlineCode  = regexp.MustCompile("``[^`]*``|`[^`\n]*`")
)

// stripCode drops code blocks and spans, where brackets are not links.
func stripCode(md string) string {
	return inlineCode.ReplaceAllString(fencedBlock.ReplaceAllString(md, ""), "")
}

// TestLibrarySnippets: each Go block of docs/libraries.md preceded by
// "<!-- snippet: FILE FUNC -->" is, byte for byte, that function of FILE.
func TestLibrarySnippets(t *testing.T) {
	doc := read(t, "docs/libraries.md")
	marker := regexp.MustCompile("(?s)<!-- snippet: (\\S+) (\\S+) -->\n```go\n(.*?)\n```")
	found := marker.FindAllStringSubmatch(doc, -1)
	if len(found) < 10 {
		t.Fatalf("found only %d snippets in docs/libraries.md", len(found))
	}
	for _, m := range found {
		file, name, got := m[1], m[2], m[3]
		want := funcSource(t, file, name)
		if got != want {
			t.Errorf("docs/libraries.md: the snippet of %s in %s differs from the source; paste it again:\n%s", name, file, want)
		}
	}
}

// funcSource returns the text of a top-level function, from "func" to its
// closing brace.
func funcSource(t *testing.T, file, name string) string {
	t.Helper()
	src := []byte(read(t, file))
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != name {
			continue
		}
		start, end := fset.Position(fn.Pos()).Offset, fset.Position(fn.End()).Offset
		return string(bytes.TrimRight(src[start:end], "\n"))
	}
	t.Fatalf("%s has no function %s", file, name)
	return ""
}
