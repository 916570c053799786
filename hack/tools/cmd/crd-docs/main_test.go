package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

const bases = "../../../../api/crd/bases"

// TestEveryRuleAndDefaultIsRendered: each CEL message and default of the
// CRD YAML shows in the reference, and rendering is deterministic.
func TestEveryRuleAndDefaultIsRendered(t *testing.T) {
	doc, err := render(bases)
	if err != nil {
		t.Fatal(err)
	}
	again, err := render(bases)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, again) {
		t.Fatal("two renderings differ")
	}
	out := string(doc)
	crd, err := os.ReadFile(bases + "/network.swh.dev_servicewithhealthchecks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Messages may be folded over several YAML lines; compare their first words.
	msgs := regexp.MustCompile(`(?m)^\s*(?:- )?message: (.+)$`).FindAllStringSubmatch(string(crd), -1)
	if len(msgs) < 20 {
		t.Fatalf("found only %d CEL messages in the CRD", len(msgs))
	}
	for _, m := range msgs {
		words := strings.Fields(strings.Trim(m[1], `'"`))
		head := strings.Join(words[:min(4, len(words))], " ")
		if !strings.Contains(out, head) {
			t.Errorf("the reference lacks the CEL message starting %q", head)
		}
	}
	for _, want := range []string{
		"#### `spec.healthcheck.probes[].postgreSQL.tlsMode`",
		"default `\"postgres\"`",
		"#### `spec.ports[].targetPort`",
		"**integer or string**",
		"default `[\"200-399\"]`",
		"list type map (keys `port`, `protocol`)",
		"one of `TCP`, `HTTP`, `PostgreSQL`",
		"#### `status.conditions[].reason`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
}
