package docs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// notInRepo are texts that point at files a clone does not have: the team's
// planning notes beside the repository. What a reader needs of them is in
// docs/design.md. They are built by concatenation so this file does not
// name them itself.
var notInRepo = []string{
	"../" + "shared",
	"DESIGN" + ".md",
	"product " + "statement",
}

// planningIssue matches a reference to the team's numbered planning issues
// (the word, a space, a number); upstream issues are cited as owner/repo#N.
var planningIssue = regexp.MustCompile(`(?i)\b` + `issue [0-9]+\b`)

// TestStandalone: no tracked file points at files outside the repository,
// so the repository reads on its own.
func TestStandalone(t *testing.T) {
	files := trackedFiles(t)
	if len(files) < 100 {
		t.Fatalf("found only %d files in the repository", len(files))
	}
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if loc := planningIssue.FindIndex(data); loc != nil {
			line := bytes.Count(data[:loc[0]], []byte("\n")) + 1
			t.Errorf("%s:%d mentions %q, a planning issue a reader cannot see: say what is required instead", rel, line, data[loc[0]:loc[1]])
		}
		for _, text := range notInRepo {
			if i := bytes.Index(data, []byte(text)); i >= 0 {
				line := bytes.Count(data[:i], []byte("\n")) + 1
				t.Errorf("%s:%d mentions %q, which a clone does not have: say what the reader needs, or link docs/design.md", rel, line, text)
			}
		}
	}
}

// trackedFiles lists the files git tracks, relative to root; outside a git
// checkout (a source archive), every file but the build outputs.
func trackedFiles(t *testing.T) []string {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "_out":
				return filepath.SkipDir
			}
			return nil
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
