package harness

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcessCPU returns the CPU time (user and system) in seconds a process
// has used, with that of its waited-for children when children is set:
// utime, stime, cutime and cstime of /proc/<pid>/stat, in clock ticks of
// 1/100 s (Linux's USER_HZ on every architecture Go supports).
func ProcessCPU(pid int, children bool) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// utime is the 12th field after it.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	last := 12
	if children {
		last = 14
	}
	if len(fields) <= last {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(fields))
	}
	total := 0.0
	for _, f := range fields[11 : last+1] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		total += v
	}
	return total / 100, nil
}

// ProcessMemoryKiB returns fields of /proc/<pid>/status given in kB, such
// as VmRSS and VmHWM (the peak), in the order asked.
func ProcessMemoryKiB(pid int, fields ...string) ([]int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	defer func() { _ = f.Close() }()
	found := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		value := strings.Fields(rest)
		if len(value) == 2 && value[1] == "kB" {
			if kib, err := strconv.Atoi(value[0]); err == nil {
				found[name] = kib
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	out := make([]int, len(fields))
	for i, name := range fields {
		kib, ok := found[name]
		if !ok {
			return nil, fmt.Errorf("/proc/%d/status has no %s", pid, name)
		}
		out[i] = kib
	}
	return out, nil
}

// LoadAverage returns the machine's load averages over 1, 5 and 15
// minutes, for a benchmark's report; "unknown" if it cannot read them.
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
