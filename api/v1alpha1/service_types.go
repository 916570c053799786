package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ServiceWithHealthchecksSpec repeats every field of corev1.ServiceSpec under
// the same JSON name (spec.ports, spec.selector, spec.type, …) and adds the
// healthcheck section. The fields are declared here rather than embedded so
// that each one carries the validation this product needs (bounded lists for
// CEL, unique port names, no ExternalName); TestSpecCoversServiceSpec keeps
// the two in step.
//
// +kubebuilder:validation:XValidation:rule="has(self.selector) && self.selector.size() > 0",message="spec.selector must select the pods to probe",fieldPath=.selector
// +kubebuilder:validation:XValidation:rule="!has(self.externalName) || self.externalName.size() == 0",message="spec.externalName is not supported: a ServiceWithHealthchecks has pods to probe",fieldPath=.externalName
// +kubebuilder:validation:XValidation:rule="self.ports.size() <= 1 || self.ports.all(p, has(p.name) && p.name.size() > 0)",message="spec.ports[].name is required when more than one port is defined",fieldPath=.ports
// +kubebuilder:validation:XValidation:rule="self.ports.all(p, !has(p.name) || self.ports.exists_one(q, has(q.name) && q.name == p.name))",message="spec.ports[].name must be unique",fieldPath=.ports
// +kubebuilder:validation:XValidation:rule="!has(self.externalTrafficPolicy) || self.type in ['NodePort', 'LoadBalancer']",message="spec.externalTrafficPolicy may only be set when spec.type is NodePort or LoadBalancer",fieldPath=.externalTrafficPolicy
// +kubebuilder:validation:XValidation:rule="!has(self.healthCheckNodePort) || self.healthCheckNodePort == 0 || (self.type == 'LoadBalancer' && has(self.externalTrafficPolicy) && self.externalTrafficPolicy == 'Local')",message="spec.healthCheckNodePort may only be set when spec.type is LoadBalancer and spec.externalTrafficPolicy is Local",fieldPath=.healthCheckNodePort
// +kubebuilder:validation:XValidation:rule="self.type in ['NodePort', 'LoadBalancer'] || self.ports.all(p, !has(p.nodePort) || p.nodePort == 0)",message="spec.ports[].nodePort may only be set when spec.type is NodePort or LoadBalancer",fieldPath=.ports
// +kubebuilder:validation:XValidation:rule="!has(self.clusterIP) || self.clusterIP != 'None' || self.type == 'ClusterIP'",message="spec.clusterIP may be None (headless) only when spec.type is ClusterIP",fieldPath=.clusterIP
// +kubebuilder:validation:XValidation:rule="!has(self.sessionAffinityConfig) || self.sessionAffinity == 'ClientIP'",message="spec.sessionAffinityConfig may only be set when spec.sessionAffinity is ClientIP",fieldPath=.sessionAffinityConfig
// +kubebuilder:validation:XValidation:rule="!has(self.loadBalancerIP) || self.type == 'LoadBalancer'",message="spec.loadBalancerIP may only be set when spec.type is LoadBalancer",fieldPath=.loadBalancerIP
// +kubebuilder:validation:XValidation:rule="!has(self.disruptionBudget) || !has(self.disruptionBudget.ports) || self.disruptionBudget.ports.all(n, self.ports.exists(p, has(p.name) && p.name == n))",message="spec.disruptionBudget.ports[] must name ports of spec.ports",fieldPath=.disruptionBudget.ports
// +kubebuilder:validation:XValidation:rule="!has(self.exclusive) || !has(self.exclusive.ports) || self.exclusive.ports.all(n, self.ports.exists(p, has(p.name) && p.name == n))",message="spec.exclusive.ports[] must name ports of spec.ports",fieldPath=.exclusive.ports
// +kubebuilder:validation:XValidation:rule="!has(self.exclusive) || !has(self.publishNotReadyAddresses) || !self.publishNotReadyAddresses",message="spec.exclusive cannot be set with spec.publishNotReadyAddresses, which publishes every pod ready",fieldPath=.exclusive
// +kubebuilder:validation:XValidation:rule="!has(self.exclusive) || self.ports.all(p, !has(p.floor) || !has(p.floor.below) || p.floor.below == 'Closed' || (has(self.exclusive.ports) && self.exclusive.ports.size() > 0 && !(has(p.name) && p.name in self.exclusive.ports)))",message="spec.ports[].floor.below must be Closed on an exclusive port (spec.exclusive): Open would publish several pods ready, Freeze would keep a primary that may be gone and block the failover",fieldPath=.ports
// +kubebuilder:validation:XValidation:rule="!has(self.clusterIPs) || self.clusterIPs.size() == 0 || !has(self.clusterIP) || self.clusterIPs[0] == self.clusterIP",message="spec.clusterIPs[0] must equal spec.clusterIP",fieldPath=.clusterIPs
type ServiceWithHealthchecksSpec struct {
	// Ports are the ports the Service exposes. Each one gets its own
	// EndpointSlice per node, gated by the probes that check its targetPort.
	// +listType=map
	// +listMapKey=port
	// +listMapKey=protocol
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +required
	Ports []ServicePort `json:"ports"`

	// Selector picks the pods to probe and publish. Unlike a Service, it is
	// required: the child Service gets none.
	// +mapType=atomic
	// +required
	Selector map[string]string `json:"selector,omitempty"`

	// ClusterIP as in a Service; "None" makes the resource headless.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	ClusterIP string `json:"clusterIP,omitempty"`

	// ClusterIPs as in a Service.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=45
	ClusterIPs []string `json:"clusterIPs,omitempty"`

	// The enum refuses ExternalName, not a CEL rule: the API server skips
	// CEL rules once a required field is missing, and an ExternalName
	// manifest usually has no selector, so only a schema error names
	// spec.type.

	// Type as in a Service. ExternalName is not supported: it has no
	// endpoints to probe.
	// +optional
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	Type corev1.ServiceType `json:"type,omitempty"`

	// ExternalIPs as in a Service.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=45
	ExternalIPs []string `json:"externalIPs,omitempty"`

	// SessionAffinity as in a Service.
	// +optional
	// +kubebuilder:default=None
	// +kubebuilder:validation:Enum=ClientIP;None
	SessionAffinity corev1.ServiceAffinity `json:"sessionAffinity,omitempty"`

	// LoadBalancerIP as in a Service (deprecated there too).
	// +optional
	// +kubebuilder:validation:MaxLength=45
	LoadBalancerIP string `json:"loadBalancerIP,omitempty"`

	// LoadBalancerSourceRanges as in a Service.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=49
	LoadBalancerSourceRanges []string `json:"loadBalancerSourceRanges,omitempty"`

	// ExternalName exists only so Service manifests convert as they are; it
	// must stay empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ExternalName string `json:"externalName,omitempty"`

	// ExternalTrafficPolicy as in a Service. With Local, kube-proxy sends
	// external traffic only to endpoints whose nodeName is its own node,
	// which the agent sets on every endpoint.
	// +optional
	// +kubebuilder:validation:Enum=Cluster;Local
	ExternalTrafficPolicy corev1.ServiceExternalTrafficPolicy `json:"externalTrafficPolicy,omitempty"`

	// HealthCheckNodePort as in a Service.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	HealthCheckNodePort int32 `json:"healthCheckNodePort,omitempty"`

	// PublishNotReadyAddresses publishes every running pod with an IP as
	// ready, whatever its probes say.
	// +optional
	PublishNotReadyAddresses bool `json:"publishNotReadyAddresses,omitempty"`

	// SessionAffinityConfig as in a Service.
	// +optional
	SessionAffinityConfig *corev1.SessionAffinityConfig `json:"sessionAffinityConfig,omitempty"`

	// IPFamilies as in a Service.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:Enum=IPv4;IPv6
	IPFamilies []corev1.IPFamily `json:"ipFamilies,omitempty"`

	// IPFamilyPolicy as in a Service.
	// +optional
	// +kubebuilder:validation:Enum=SingleStack;PreferDualStack;RequireDualStack
	IPFamilyPolicy *corev1.IPFamilyPolicy `json:"ipFamilyPolicy,omitempty"`

	// AllocateLoadBalancerNodePorts as in a Service.
	// +optional
	AllocateLoadBalancerNodePorts *bool `json:"allocateLoadBalancerNodePorts,omitempty"`

	// LoadBalancerClass as in a Service.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LoadBalancerClass *string `json:"loadBalancerClass,omitempty"`

	// InternalTrafficPolicy as in a Service.
	// +optional
	// +kubebuilder:validation:Enum=Cluster;Local
	InternalTrafficPolicy *corev1.ServiceInternalTrafficPolicy `json:"internalTrafficPolicy,omitempty"`

	// TrafficDistribution as in a Service.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	TrafficDistribution *string `json:"trafficDistribution,omitempty"`

	// Healthcheck holds the active probes. Without it, pods are published on
	// pod readiness alone, like a plain Service.
	// +optional
	Healthcheck *Healthcheck `json:"healthcheck,omitempty"`

	// DisruptionBudget, when set, makes the eviction guard refuse (HTTP 429,
	// which kubectl drain retries) an eviction of a selected pod that would
	// leave fewer pods passing their probes than the budget requires.
	// +optional
	DisruptionBudget *DisruptionBudget `json:"disruptionBudget,omitempty"`

	// Exclusive, when set, publishes at most one pod ready on its ports
	// across the cluster: the one whose agent holds the port's Lease. For
	// a database's write port, so that two pods that both claim to be the
	// primary never both receive writes.
	// +optional
	Exclusive *Exclusive `json:"exclusive,omitempty"`

	// ReadinessGate configures the condition the agents write for pods that
	// declare this resource's readiness gate (see
	// ReadinessGateConditionType); without it, the mode is Once.
	// +optional
	ReadinessGate *ReadinessGate `json:"readinessGate,omitempty"`
}

// ServicePort is corev1.ServicePort with the validation the agent relies on.
type ServicePort struct {
	// Name of the port; required and unique when there is more than one.
	// EndpointSlice ports carry the same name.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// Protocol of the port.
	// +kubebuilder:default=TCP
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty"`

	// AppProtocol as in a Service port.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AppProtocol *string `json:"appProtocol,omitempty"`

	// Port is the Service port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +required
	Port int32 `json:"port"`

	// TargetPort is the pod port traffic is sent to, a number or a container
	// port name; it defaults to Port. Probes whose targetPort equals it gate
	// this port only. (omitzero, unlike corev1's omitempty, keeps a typed
	// client from sending an unset target port as 0.)
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.size() <= 15 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",message="targetPort must be a number from 1 to 65535 or an IANA service name (at most 15 lowercase letters, digits and single '-', with a letter)"
	TargetPort intstr.IntOrString `json:"targetPort,omitzero"`

	// NodePort as in a Service port.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	NodePort int32 `json:"nodePort,omitempty"`

	// Floor, when set, says what the port publishes while fewer pods than
	// its minimum pass it across the cluster: the pods that pass (Closed),
	// every pod (Open) or the last set published (Freeze). Not part of
	// the child Service's port.
	// +optional
	Floor *PortFloor `json:"floor,omitempty"`
}
