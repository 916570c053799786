package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Footprint sums the resident memory of every process the calling process
// can see, by program name: inside hack/netns.sh's PID namespace that is the
// whole cluster (control plane, nodes, containers) and the suite itself.
func Footprint() string {
	byName := map[string]int64{}
	counts := map[string]int{}
	var total int64
	procs := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var name string
		var rss int64
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				name = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rss = kb
			}
		}
		procs++
		byName[name] += rss
		counts[name]++
		total += rss
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return byName[names[i]] > byName[names[j]] })
	parts := []string{}
	for _, n := range names {
		if byName[n] < 10*1024 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d MiB (%d)", n, byName[n]/1024, counts[n]))
	}
	return fmt.Sprintf("%d MiB RSS in %d processes: %s", total/1024, procs, strings.Join(parts, ", "))
}
