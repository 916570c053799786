package main

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// cpuTime returns the CPU time this process has used, user and system
// (getrusage RUSAGE_SELF).
func cpuTime() (user, sys time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// sample is what one measured loop of ops cost, per op.
type sample struct {
	NsPerOp     float64
	AllocsPerOp float64
	BytesPerOp  float64
	UserUsPerOp float64 // CPU µs in user space
	SysUsPerOp  float64 // CPU µs in the kernel (on loopback this includes the kernel's work for the server's side of the packets)
	Failures    int
}

func (s sample) CPUUsPerOp() float64 { return s.UserUsPerOp + s.SysUsPerOp }

// measure runs op n times in a row and returns the cost per op: wall time,
// heap allocations (of the whole process, so goroutines the op starts
// count) and CPU time from getrusage.
func measure(n int, op func() error) sample {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	u0, s0 := cpuTime()
	t0 := time.Now()
	failures := 0
	for range n {
		if op() != nil {
			failures++
		}
	}
	elapsed := time.Since(t0)
	u1, s1 := cpuTime()
	runtime.ReadMemStats(&m1)
	f := float64(n)
	return sample{
		NsPerOp:     float64(elapsed.Nanoseconds()) / f,
		AllocsPerOp: float64(m1.Mallocs-m0.Mallocs) / f,
		BytesPerOp:  float64(m1.TotalAlloc-m0.TotalAlloc) / f,
		UserUsPerOp: float64((u1 - u0).Nanoseconds()) / 1e3 / f,
		SysUsPerOp:  float64((s1 - s0).Nanoseconds()) / 1e3 / f,
		Failures:    failures,
	}
}

// medianSample takes the median of every figure over rounds (failures add
// up).
func medianSample(rounds []sample) sample {
	pick := func(get func(sample) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = get(r)
		}
		return median(v)
	}
	out := sample{
		NsPerOp:     pick(func(s sample) float64 { return s.NsPerOp }),
		AllocsPerOp: pick(func(s sample) float64 { return s.AllocsPerOp }),
		BytesPerOp:  pick(func(s sample) float64 { return s.BytesPerOp }),
		UserUsPerOp: pick(func(s sample) float64 { return s.UserUsPerOp }),
		SysUsPerOp:  pick(func(s sample) float64 { return s.SysUsPerOp }),
	}
	for _, r := range rounds {
		out.Failures += r.Failures
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the p-th quantile (0..1) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1)+0.5)]
}

// socketPair is a TCP connection's local and remote ends.
type socketPair struct{ local, remote netip.AddrPort }

// timeWaits returns the TCP connections in TIME_WAIT (state 06), from
// /proc/net/tcp and /proc/net/tcp6.
func timeWaits() map[socketPair]bool {
	out := map[socketPair]bool{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "06" {
				continue
			}
			out[socketPair{procAddr(f[1]), procAddr(f[2])}] = true
		}
	}
	return out
}

// newTimeWaits counts the connections in TIME_WAIT now, and not in before,
// whose remote end is one of servers: the sockets a prober left behind. (A
// port of a server may have served an earlier run whose sockets still wait:
// those are in before.)
func newTimeWaits(before map[socketPair]bool, servers map[netip.AddrPort]bool) int {
	n := 0
	for p := range timeWaits() {
		if servers[p.remote] && !before[p] {
			n++
		}
	}
	return n
}

// procAddr decodes an address of /proc/net/tcp{,6}: the IP as 32-bit words
// in host (little-endian) order, a colon, and the port in big-endian hex.
// IPv4-mapped IPv6 addresses come back as IPv4.
func procAddr(s string) netip.AddrPort {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}
	}
	raw, err := hex.DecodeString(ipHex)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}
	}
	for i := 0; i+4 <= len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	port, err := hex.DecodeString(portHex)
	if err != nil || len(port) != 2 {
		return netip.AddrPort{}
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), binary.BigEndian.Uint16(port))
}
