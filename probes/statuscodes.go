package probes

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

const (
	minStatus = 100
	maxStatus = 599
)

// StatusCodes is a set of HTTP status codes between 100 and 599. The zero
// value is the empty set. It is a small value (a bitmap): copy it freely,
// compare it with ==.
type StatusCodes struct {
	bits [(maxStatus - minStatus + 64) / 64]uint64
}

// DefaultStatusCodes returns 200-399, the codes Kubernetes probes accept:
// 2xx, and 3xx because a redirect proves the server is up.
func DefaultStatusCodes() StatusCodes {
	var s StatusCodes
	s.addRange(200, 399)
	return s
}

// ParseStatusCodes parses codes ("204") and inclusive ranges ("200-399").
// Each argument may hold several, separated by commas ("200-299,304").
// Codes have three digits, from 100 to 599; ranges are written low-high.
// At least one code is required.
func ParseStatusCodes(specs ...string) (StatusCodes, error) {
	s, err := parseStatusCodes(specs)
	if err != nil {
		return StatusCodes{}, fmt.Errorf("probes: %w", err)
	}
	return s, nil
}

// parseStatusCodes is ParseStatusCodes with errors that do not name the
// package, for callers that already do.
func parseStatusCodes(specs []string) (StatusCodes, error) {
	var s StatusCodes
	for _, spec := range specs {
		for part := range strings.SplitSeq(spec, ",") {
			lo, hi, err := parseStatusPart(part)
			if err != nil {
				return StatusCodes{}, fmt.Errorf("status codes %q: %w", spec, err)
			}
			s.addRange(lo, hi)
		}
	}
	if s == (StatusCodes{}) {
		return StatusCodes{}, errors.New("no status codes")
	}
	return s, nil
}

func parseStatusPart(part string) (lo, hi int, err error) {
	low, high, isRange := strings.Cut(part, "-")
	if lo, err = parseStatus(low); err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = parseStatus(high); err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("range %d-%d is not written low-high", lo, hi)
	}
	return lo, hi, nil
}

func parseStatus(s string) (int, error) {
	s = strings.TrimSpace(s)
	if len(s) != 3 || s[0] < '1' || s[0] > '5' || !isDigit(s[1]) || !isDigit(s[2]) {
		return 0, fmt.Errorf("%q is not a status code from 100 to 599", s)
	}
	return int(s[0]-'0')*100 + int(s[1]-'0')*10 + int(s[2]-'0'), nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (s *StatusCodes) addRange(lo, hi int) {
	for c := lo; c <= hi; c++ {
		i := c - minStatus
		s.bits[i/64] |= 1 << (i % 64)
	}
}

// Contains reports whether code is in the set.
func (s StatusCodes) Contains(code int) bool {
	if code < minStatus || code > maxStatus {
		return false
	}
	i := code - minStatus
	return s.bits[i/64]&(1<<(i%64)) != 0
}

// String returns the set in the syntax ParseStatusCodes reads, with ranges
// merged and sorted: "200-399", "200,204,300-302"; "" for the empty set.
func (s StatusCodes) String() string {
	var b strings.Builder
	for c := minStatus; c <= maxStatus; c++ {
		if !s.Contains(c) {
			continue
		}
		lo := c
		for c+1 <= maxStatus && s.Contains(c+1) {
			c++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(lo))
		if c > lo {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c))
		}
	}
	return b.String()
}
