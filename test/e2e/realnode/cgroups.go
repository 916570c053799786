package realnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/swh-dev/swh/test/harness"
)

// cgroups creates each node's cgroup root (kubelet's cgroupRoot, under
// which it makes kubepods) and removes it with everything kubelet made
// under it. On cgroup v1 the root must exist in every hierarchy beforehand,
// with cpuset's cpus and mems copied from the parent; on v2 (one unified
// hierarchy with cgroup.controllers at its top) one folder, with the
// controllers kubelet needs enabled for its children.
type cgroups struct {
	// mounts are the hierarchies' folders.
	mounts []string
	v2     bool
	made   []string
	// unified is the empty v2 mount of a hybrid layout, where runc and
	// kubelet make folders too: removed and checked, never created.
	unified string
	// enabled are the controllers this process enabled in the v2 root's
	// subtree_control, disabled again by removeAll.
	enabled []string
}

const cgroupFS = "/sys/fs/cgroup"

func detectCgroups() (*cgroups, error) {
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		return &cgroups{mounts: []string{cgroupFS}, v2: true}, nil
	}
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", cgroupFS, err)
	}
	cg := &cgroups{}
	for _, e := range entries {
		// Links such as cpu,cpuacct name a hierarchy listed under its own
		// name too; "unified" is the empty v2 mount of a hybrid layout.
		if e.IsDir() && e.Name() == "unified" {
			cg.unified = filepath.Join(cgroupFS, e.Name())
			continue
		}
		if !e.IsDir() {
			continue
		}
		cg.mounts = append(cg.mounts, filepath.Join(cgroupFS, e.Name()))
	}
	if len(cg.mounts) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy under %s", cgroupFS)
	}
	return cg, nil
}

// create makes the cgroup NAME in every hierarchy.
func (cg *cgroups) create(name string) error {
	for _, m := range cg.mounts {
		dir := filepath.Join(m, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		cg.made = append(cg.made, dir)
		if filepath.Base(m) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				data, err := os.ReadFile(filepath.Join(m, f))
				if err != nil {
					return fmt.Errorf("reading %s: %w", f, err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
					return fmt.Errorf("writing %s of %s: %w", f, dir, err)
				}
			}
		}
		if cg.v2 {
			if err := cg.enableAtRoot(); err != nil {
				return err
			}
			// Best effort: a controller the root lacks is not ours to add.
			for _, c := range v2Controllers {
				_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0o644)
			}
		}
	}
	if cg.unified != "" {
		cg.made = append(cg.made, filepath.Join(cg.unified, name))
	}
	return nil
}

// v2Controllers are those kubelet needs (cpuset, cpu, memory, pids) or uses.
var v2Controllers = []string{"cpuset", "cpu", "io", "memory", "pids", "hugetlb"}

// enableAtRoot enables at the v2 root the controllers kubelet needs that
// the root offers but does not pass down (a machine whose PID 1 is not
// systemd often passes none), and records them so removeAll undoes it.
func (cg *cgroups) enableAtRoot() error {
	offered, err := os.ReadFile(filepath.Join(cgroupFS, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("reading the root's cgroup controllers: %w", err)
	}
	on, err := os.ReadFile(filepath.Join(cgroupFS, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("reading the root's cgroup subtree_control: %w", err)
	}
	for _, c := range v2Controllers {
		if !slices.Contains(strings.Fields(string(offered)), c) || slices.Contains(strings.Fields(string(on)), c) {
			continue
		}
		if err := os.WriteFile(filepath.Join(cgroupFS, "cgroup.subtree_control"), []byte("+"+c), 0o644); err != nil {
			if c == "cpuset" || c == "cpu" || c == "memory" || c == "pids" {
				return fmt.Errorf("%w: enabling the cgroup v2 controller %s at the root (kubelet needs it): %v", harness.ErrMissingDependency, c, err)
			}
			continue
		}
		cg.enabled = append(cg.enabled, c)
	}
	return nil
}

// removeAll removes every cgroup create made, deepest first. A cgroup with
// processes left cannot be removed: that is reported.
func (cg *cgroups) removeAll() error {
	var errs []error
	for _, root := range cg.made {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	if len(errs) == 0 {
		// Undo at the root what create enabled (best effort: another
		// cgroup may use a controller by now).
		for _, c := range cg.enabled {
			_ = os.WriteFile(filepath.Join(cgroupFS, "cgroup.subtree_control"), []byte("-"+c), 0o644)
		}
		cg.enabled = nil
	}
	return errors.Join(errs...)
}

// sweep removes the empty cgroups that earlier runs killed before their
// cleanup left (prefix + "*" in every hierarchy); one with processes stays.
func (cg *cgroups) sweep(prefix string) {
	mounts := cg.mounts
	if cg.unified != "" {
		mounts = append(mounts, cg.unified)
	}
	var old []string
	for _, m := range mounts {
		found, _ := filepath.Glob(filepath.Join(m, prefix+"*"))
		old = append(old, found...)
	}
	_ = (&cgroups{made: old}).removeAll()
}

// left lists the cgroups create made that still exist.
func (cg *cgroups) left() []string {
	var out []string
	for _, d := range cg.made {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}
