// Package v1alpha1 holds the ServiceWithHealthchecks API: a Service spec plus
// a healthcheck section of active probes, in the group network.swh.dev.
//
// The Service part repeats every field of corev1.ServiceSpec under the same
// JSON names, so a Service manifest becomes a ServiceWithHealthchecks by
// changing apiVersion and kind; Spec.ServiceSpec converts it back.
//
// +kubebuilder:object:generate=true
// +groupName=network.swh.dev
package v1alpha1
