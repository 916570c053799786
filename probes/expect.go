package probes

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
)

// Bounds of what TCP scripts and HTTP body matches send, read and keep. A
// health check's answers are a banner or a status line: a few hundred
// bytes. The bounds keep a server that streams without end, or one that
// never sends what is expected, from holding more than this per probe.
const (
	// MaxScriptSteps bounds a TCP script.
	MaxScriptSteps = 16
	// MaxSendBytes bounds what one step sends.
	MaxSendBytes = 4 << 10
	// MaxExpectBytes bounds what one step's expect reads before it gives
	// up: the match must be found within that many bytes after the
	// previous match.
	MaxExpectBytes = 16 << 10
	// MaxExpectPatternBytes bounds an expect's literal or regular
	// expression.
	MaxExpectPatternBytes = 1 << 10
	// MaxExpectProgramSize bounds the program a regular expression
	// compiles to, in RE2 instructions: a search costs time linear in the
	// bytes searched times this size, and a short pattern with a counted
	// repetition ("(a?){500}") compiles to thousands. A health check's
	// pattern takes a few dozen.
	MaxExpectProgramSize = 256
	// regexpSearchBudget bounds the bytes one probe's regular expressions
	// search again after each read; past it, a step searches when its
	// bytes have doubled and when its reading ends: a server dripping its
	// answer a byte at a time would otherwise make each read search
	// everything again.
	regexpSearchBudget = 2 * MaxExpectBytes
	// DefaultExpectBodyBytes is how much of an HTTP body is searched when
	// the config does not say: GCE's health checks match in the first
	// 1,024 bytes too.
	DefaultExpectBodyBytes = 1 << 10
	// MaxExpectBodyBytes bounds HTTPConfig.ExpectBodyBytes.
	MaxExpectBodyBytes = 64 << 10
	// maxShownBytes is how much of what arrived a mismatch's message
	// shows: quoted, that is at most 4 times as many characters.
	maxShownBytes = 160
)

// Expect is what some received bytes must contain: exactly one of Literal
// (the bytes as they are) and Regexp (RE2 syntax, matched anywhere in the
// bytes read so far: anchor with ^ to match at their start, write (?s) to
// let . cross lines).
type Expect struct {
	Literal []byte
	Regexp  string
}

// matcher is a compiled Expect.
type matcher struct {
	literal []byte
	re      *regexp.Regexp
}

func compileExpect(e Expect) (*matcher, error) {
	switch {
	case len(e.Literal) > 0 && e.Regexp != "":
		return nil, errors.New("set Literal or Regexp, not both")
	case len(e.Literal) == 0 && e.Regexp == "":
		return nil, errors.New("set Literal or Regexp")
	case len(e.Literal) > MaxExpectPatternBytes || len(e.Regexp) > MaxExpectPatternBytes:
		return nil, fmt.Errorf("pattern longer than %d bytes", MaxExpectPatternBytes)
	case e.Regexp != "":
		re, err := regexp.Compile(e.Regexp)
		if err != nil {
			return nil, fmt.Errorf("regexp: %w", err)
		}
		if size := programSize(e.Regexp); size > MaxExpectProgramSize {
			return nil, fmt.Errorf("regexp %.40q compiles to %d instructions, more than %d: write it without large counted repetitions", e.Regexp, size, MaxExpectProgramSize)
		}
		return &matcher{re: re}, nil
	}
	return &matcher{literal: bytes.Clone(e.Literal)}, nil
}

// programSize is the number of instructions of the program RE2 runs for
// pattern, which regexp.Compile has accepted.
func programSize(pattern string) int {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0
	}
	return len(prog.Inst)
}

// search looks for a match in b, which extends what an earlier search of
// the same step saw: searched is how much of b that was. A literal is
// looked for only where a new match can be. A regular expression searches
// all of b again while budget lasts (the bytes it has left to search);
// past it, only when b has doubled since its last search (full: that
// search's length), so that its work stays linear in the bytes read
// however they are split.
func (m *matcher) search(b []byte, searched int, full, budget *int) int {
	if m.re == nil {
		from := max(0, searched-len(m.literal)+1)
		if i := bytes.Index(b[from:], m.literal); i >= 0 {
			return from + i + len(m.literal)
		}
		return -1
	}
	switch {
	case *budget >= len(b):
		*budget -= len(b)
	case len(b) < 2**full:
		return -1
	}
	*full = len(b)
	return m.end(b)
}

// end returns where the first match in b ends, or -1.
func (m *matcher) end(b []byte) int {
	if m.re != nil {
		loc := m.re.FindIndex(b)
		if loc == nil {
			return -1
		}
		return loc[1]
	}
	i := bytes.Index(b, m.literal)
	if i < 0 {
		return -1
	}
	return i + len(m.literal)
}

// String describes the pattern for messages.
func (m *matcher) String() string {
	if m.re != nil {
		return "regexp " + strconv.Quote(cutText(m.re.String(), maxShownBytes))
	}
	return strconv.Quote(cutText(string(m.literal), maxShownBytes))
}

// MismatchError is the Err of a result whose TCP step or HTTP body did not
// match what was expected.
type MismatchError struct {
	Step     int    // the TCP script's step, from 1; 0 for an HTTP body
	Expected string // the pattern, quoted
	Got      []byte // the start of what arrived, at most maxShownBytes
	Read     int    // how many bytes were searched
	Why      string // why the search stopped: the bound, the end of the data
}

func (e *MismatchError) Error() string {
	where := "body"
	if e.Step > 0 {
		where = "step " + strconv.Itoa(e.Step)
	}
	// The cause before the bytes: the message may be cut at its end.
	return fmt.Sprintf("%s: expected %s, not found in %d bytes (%s): got %s", where, e.Expected, e.Read, e.Why, quoteShown(e.Got))
}

// mismatch returns the MismatchError of a search that stopped for why,
// keeping only the start of what arrived.
func mismatch(step int, m *matcher, got []byte, why string) *MismatchError {
	return &MismatchError{Step: step, Expected: m.String(), Got: bytes.Clone(got[:min(len(got), maxShownBytes+1)]), Read: len(got), Why: why}
}

// quoteShown quotes received bytes for a message, cut to maxShownBytes.
func quoteShown(b []byte) string {
	if len(b) > maxShownBytes {
		return strconv.Quote(string(b[:maxShownBytes])) + "…"
	}
	return strconv.Quote(string(b))
}
