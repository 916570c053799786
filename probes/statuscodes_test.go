package probes

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseStatusCodes(t *testing.T) {
	for _, tc := range []struct {
		specs []string
		want  string // String() of the set; "" for an error
	}{
		{[]string{"200-399"}, "200-399"},
		{[]string{"204"}, "204"},
		{[]string{"200", "204", "300-302"}, "200,204,300-302"},
		{[]string{"200-299,304"}, "200-299,304"},
		{[]string{" 200 - 204 "}, "200-204"},
		{[]string{"200-299", "250-350"}, "200-350"}, // overlaps merge
		{[]string{"200-299", "300-399"}, "200-399"}, // neighbours merge
		{[]string{"100-599"}, "100-599"},
		{[]string{"404", "404"}, "404"},
		{[]string{"599"}, "599"},
		{nil, ""},
		{[]string{""}, ""},
		{[]string{"200,"}, ""},
		{[]string{"399-200"}, ""},
		{[]string{"099"}, ""},
		{[]string{"600"}, ""},
		{[]string{"2000"}, ""},
		{[]string{"20"}, ""},
		{[]string{"+20"}, ""},
		{[]string{"2xx"}, ""},
		{[]string{"200-"}, ""},
		{[]string{"-200"}, ""},
		{[]string{"200-300-400"}, ""},
		{[]string{"２００"}, ""}, // full-width digits
	} {
		got, err := ParseStatusCodes(tc.specs...)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParseStatusCodes(%q) = %v, want an error", tc.specs, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseStatusCodes(%q): %v", tc.specs, err)
			continue
		}
		if got.String() != tc.want {
			t.Errorf("ParseStatusCodes(%q) = %q, want %q", tc.specs, got, tc.want)
		}
	}
}

func TestStatusCodesContains(t *testing.T) {
	s := DefaultStatusCodes()
	for code, want := range map[int]bool{
		-1: false, 0: false, 99: false, 100: false, 199: false, 200: true, 204: true,
		302: true, 399: true, 400: false, 503: false, 599: false, 600: false, 1 << 20: false,
	} {
		if s.Contains(code) != want {
			t.Errorf("DefaultStatusCodes().Contains(%d) = %v", code, !want)
		}
	}
	n := 0
	for code := range 1000 {
		if s.Contains(code) {
			n++
		}
	}
	if n != 200 {
		t.Errorf("DefaultStatusCodes() holds %d codes, want 200", n)
	}
	if (StatusCodes{}).String() != "" {
		t.Error("the empty set does not print as \"\"")
	}
}

// FuzzParseStatusCodes checks the parser against a naive reading of the
// same syntax, and that String round-trips.
func FuzzParseStatusCodes(f *testing.F) {
	for _, seed := range []string{"200-399", "204", "200,204,300-302", " 201 - 202 ", "399-200", "", "5", "100-599", "600", "2x0", "200--300"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		got, err := ParseStatusCodes(spec)
		want, ok := naiveStatusCodes(spec)
		if (err == nil) != ok {
			t.Fatalf("ParseStatusCodes(%q) error %v, naive parser ok=%v", spec, err, ok)
		}
		if err != nil {
			return
		}
		for code := 0; code <= 700; code++ {
			if got.Contains(code) != want[code] {
				t.Fatalf("ParseStatusCodes(%q).Contains(%d) = %v", spec, code, !want[code])
			}
		}
		again, err := ParseStatusCodes(got.String())
		if err != nil || again != got {
			t.Fatalf("String() of %q = %q does not parse back (%v)", spec, got, err)
		}
	})
}

// naiveStatusCodes reads the syntax in the most obvious way.
func naiveStatusCodes(spec string) (map[int]bool, bool) {
	set := map[int]bool{}
	code := func(s string) (int, bool) {
		s = strings.TrimSpace(s)
		if len(s) != 3 || strings.Trim(s, "0123456789") != "" {
			return 0, false
		}
		n, err := strconv.Atoi(s)
		return n, err == nil && n >= 100 && n <= 599
	}
	for _, part := range strings.Split(spec, ",") {
		bounds := strings.Split(part, "-")
		if len(bounds) > 2 {
			return nil, false
		}
		lo, ok := code(bounds[0])
		if !ok {
			return nil, false
		}
		hi := lo
		if len(bounds) == 2 {
			if hi, ok = code(bounds[1]); !ok || hi < lo {
				return nil, false
			}
		}
		for c := lo; c <= hi; c++ {
			set[c] = true
		}
	}
	return set, len(set) > 0
}
