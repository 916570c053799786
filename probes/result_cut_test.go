package probes

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCutText(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"short", "hello", 10, "hello"},
		{"exact", "hello", 5, "hello"},
		{"cut", "hello world", 8, "hello…"},
		{"rune boundary", "ééééé", 7, "éé…"},
		{"control characters", "a\x00b\r\nc", 10, "a b  c"},
		{"invalid UTF-8", "a\xffb", 10, "ab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cutText(tc.in, tc.n)
			if got != tc.want || len(got) > tc.n || !utf8.ValidString(got) {
				t.Errorf("cutText(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
	if got := CutMessage(strings.Repeat("x", 5000)); len(got) != MaxMessageBytes {
		t.Errorf("CutMessage kept %d bytes", len(got))
	}
}
