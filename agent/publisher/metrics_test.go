package publisher

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestSliceWriteOutcomes checks how a write's error is counted: a refusal
// by RBAC or an admission policy is told apart from other errors, since an
// operator acts on it (docs/operations.md).
func TestSliceWriteOutcomes(t *testing.T) {
	slices := schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{apierrors.NewConflict(slices, "s", errors.New("changed")), "conflict"},
		{apierrors.NewAlreadyExists(slices, "s"), "exists"},
		{apierrors.NewForbidden(slices, "s", errors.New("denied by a ValidatingAdmissionPolicy")), "forbidden"},
		{apierrors.NewInvalid(schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}, "s", field.ErrorList{field.Invalid(nil, nil,
			"ValidatingAdmissionPolicy 'swh-agent-endpointslice-services' with binding 'swh-agent-endpointslice-services' denied request: failed to configure binding: no params found")}), "forbidden"},
		{apierrors.NewInvalid(schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}, "s", field.ErrorList{field.Required(field.NewPath("addressType"), "")}), "error"},
		{apierrors.NewInternalError(errors.New("etcd")), "error"},
	} {
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		m.sliceWrite("create", tc.err)
		if got := testutil.ToFloat64(m.sliceWrites.WithLabelValues("create", tc.want)); got != 1 {
			t.Errorf("error %v: outcome %q counted %v times, want once", tc.err, tc.want, got)
		}
	}
}
