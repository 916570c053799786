package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the API in this package.
var GroupVersion = schema.GroupVersion{Group: "network.swh.dev", Version: "v1alpha1"}

// AddToScheme registers the types of this package in a scheme.
func AddToScheme(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &ServiceWithHealthchecks{}, &ServiceWithHealthchecksList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
