package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceWithHealthchecks is a Service whose endpoints are published by
// active probes instead of pod readiness. The controller creates a Service of
// the same name with no selector; the agent on each node probes the selected
// pods of its node and publishes those that pass as EndpointSlices, one per
// port per node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=swh,categories=all
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Cluster-IP",type=string,JSONPath=`.status.clusterIP`
// +kubebuilder:printcolumn:name="Ports",type=string,JSONPath=`.status.servicePorts`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (at most 63 lowercase letters, digits and '-', starting with a letter), because it names the Service"
type ServiceWithHealthchecks struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the Service to create plus the probes that gate its endpoints.
	// +required
	Spec ServiceWithHealthchecksSpec `json:"spec"`

	// Status is written by the controller from the published EndpointSlices.
	// +optional
	Status ServiceWithHealthchecksStatus `json:"status,omitempty"`
}

// ServiceWithHealthchecksList is a list of ServiceWithHealthchecks.
//
// +kubebuilder:object:root=true
type ServiceWithHealthchecksList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceWithHealthchecks `json:"items"`
}

// ServiceWithHealthchecksStatus is the observed state, aggregated by the
// controller from the agents' EndpointSlices across all nodes.
type ServiceWithHealthchecksStatus struct {
	// ObservedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions tell whether the child Service is in sync with the spec
	// (ServiceSynced), whether any endpoint is ready (EndpointsAvailable)
	// and, with spec.exclusive, whether every exclusive port has a holder
	// (ExclusivePortsHeld).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// Ports holds the ready and total endpoints of each port, counting pods.
	// +optional
	// +listType=atomic
	Ports []PortStatus `json:"ports,omitempty"`

	// ReadyEndpoints is the number of pods ready on every port of the resource.
	// +optional
	ReadyEndpoints int32 `json:"readyEndpoints,omitempty"`

	// TotalEndpoints is the number of pods selected and published in any state.
	// +optional
	TotalEndpoints int32 `json:"totalEndpoints,omitempty"`

	// Ready is ReadyEndpoints/TotalEndpoints, for the printer column.
	// +optional
	Ready string `json:"ready,omitempty"`

	// ServicePorts lists every port of the child Service as kubectl get
	// service prints them (443/TCP,9000/TCP; 80:30080/TCP with a node port),
	// for the printer column: a column's JSONPath shows only its first
	// match.
	// +optional
	ServicePorts string `json:"servicePorts,omitempty"`

	// ClusterIP is copied from the child Service.
	// +optional
	ClusterIP string `json:"clusterIP,omitempty"`

	// ClusterIPs is copied from the child Service.
	// +optional
	// +listType=atomic
	ClusterIPs []string `json:"clusterIPs,omitempty"`

	// LoadBalancer is copied from the child Service.
	// +optional
	LoadBalancer corev1.LoadBalancerStatus `json:"loadBalancer,omitempty"`

	// Disruption is the eviction guard's accounting, with a disruption
	// budget only.
	// +optional
	Disruption *DisruptionStatus `json:"disruption,omitempty"`
}

// PortStatus counts the endpoints published for one port of the resource.
type PortStatus struct {
	// Name is the name of the port in spec.ports ("" for a single unnamed port).
	// +optional
	Name string `json:"name,omitempty"`
	// Port is the Service port number.
	Port int32 `json:"port"`
	// Protocol is the port's protocol.
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty"`
	// ReadyEndpoints is the number of pods receiving traffic on this port.
	ReadyEndpoints int32 `json:"readyEndpoints"`
	// TotalEndpoints is the number of pods published on this port in any state.
	TotalEndpoints int32 `json:"totalEndpoints"`
	// Holder is the pod that holds the port when it is exclusive; empty
	// when none does.
	// +optional
	Holder string `json:"holder,omitempty"`
	// HolderNode is the node of Holder.
	// +optional
	HolderNode string `json:"holderNode,omitempty"`
}

// LabelService marks the Service the controller keeps for a resource; its
// value is the resource's name. Agents watch only Services with it.
const LabelService = "network.swh.dev/service-with-healthchecks"

// AnnotationAdopt, set to "true" on a resource, lets the controller take
// over an existing Service of the same name (the migration path); the
// agents then start from the built-in controller's slices.
const AnnotationAdopt = "network.swh.dev/adopt"

// BuiltinEndpointSliceManager is the endpointslice.kubernetes.io/managed-by
// value of the built-in EndpointSlice controller's slices, which adoption
// replaces.
const BuiltinEndpointSliceManager = "endpointslice-controller.k8s.io"
