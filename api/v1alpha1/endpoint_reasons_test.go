package v1alpha1

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEncodeBounded: a slice's reasons stay within the annotation budget
// however many endpoints it holds and however long their names, shedding
// first the messages' length, then the messages, then the last pods.
func TestEncodeBounded(t *testing.T) {
	probe := int32(0)
	since := metav1.NewTime(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	reasonsOf := func(pods, nameLen int) EndpointReasons {
		out := EndpointReasons{}
		for i := range pods {
			name := fmt.Sprintf("%04d-%s", i, strings.Repeat("p", nameLen-5))
			out[name] = EndpointReason{Reason: "timeout", Probe: &probe, Since: since,
				Message: TruncateReasonMessage(strings.Repeat("m", 400))}
		}
		return out
	}
	for _, tc := range []struct {
		name          string
		pods, nameLen int
		wantPods      int
		messageLen    int
	}{
		{"100 endpoints keep their messages", 100, 40, 100, MaxReasonMessageBytes},
		{"600 short names: messages shortened", 600, 20, 600, 64},
		{"1000 short names: no messages", 1000, 20, 1000, 0},
		{"300 long names: messages shortened", 300, 253, 300, 64},
		{"380 long names: no messages", 380, 253, 380, 0},
		{"1000 longest names: the last pods left out", 1000, 253, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value, err := reasonsOf(tc.pods, tc.nameLen).EncodeBounded(MaxEndpointReasonsBytes)
			if err != nil {
				t.Fatal(err)
			}
			if len(value) > MaxEndpointReasonsBytes {
				t.Fatalf("%d bytes, over %d", len(value), MaxEndpointReasonsBytes)
			}
			got, err := EndpointReasonsOf(map[string]string{AnnotationEndpointReasons: value})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantPods >= 0 && len(got) != tc.wantPods:
				t.Errorf("%d pods kept, want %d", len(got), tc.wantPods)
			case tc.wantPods < 0 && (len(got) == 0 || len(got) >= tc.pods):
				t.Errorf("%d of %d pods kept, want some left out", len(got), tc.pods)
			}
			for pod, r := range got {
				if len(r.Message) != tc.messageLen || r.Reason != "timeout" || r.Probe == nil {
					t.Fatalf("%s: %+v (message of %d bytes, want %d)", pod, r, len(r.Message), tc.messageLen)
				}
			}
			if tc.wantPods < 0 {
				if _, ok := got[fmt.Sprintf("%04d-%s", 0, strings.Repeat("p", tc.nameLen-5))]; !ok {
					t.Error("the first pod by name was left out")
				}
			}
		})
	}
}
