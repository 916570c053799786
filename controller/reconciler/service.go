package reconciler

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// Annotations and values the controller reads or skips.
const (
	// lastAppliedAnnotation is kubectl's bookkeeping; it describes the
	// resource, not the Service, so it is never copied.
	lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
)

// desiredService returns what the controller owns of the child Service: the
// resource's Service spec without a selector, its labels and annotations,
// and a controller owner reference. Fields the user left unset (cluster IP,
// node ports, health-check node port) stay out, so what the API server
// allocates is never owned, and never fought over.
func desiredService(swh *swhv1alpha1.ServiceWithHealthchecks) *corev1ac.ServiceApplyConfiguration {
	spec := swh.Spec.ServiceSpec()
	out := corev1ac.Service(swh.Name, swh.Namespace).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(swhv1alpha1.GroupVersion.String()).
			WithKind("ServiceWithHealthchecks").
			WithName(swh.Name).
			WithUID(swh.UID).
			WithController(true).
			WithBlockOwnerDeletion(true))
	labels := propagated(swh.Labels)
	labels[swhv1alpha1.LabelService] = swh.Name
	out.WithLabels(labels)
	if annotations := propagated(swh.Annotations); len(annotations) > 0 {
		out.WithAnnotations(annotations)
	}

	s := corev1ac.ServiceSpec()
	for i := range spec.Ports {
		s.WithPorts(desiredPort(&spec.Ports[i]))
	}
	if spec.Type != "" {
		s.WithType(spec.Type)
	}
	if spec.ClusterIP != "" {
		s.WithClusterIP(spec.ClusterIP)
	}
	if len(spec.ClusterIPs) > 0 {
		s.WithClusterIPs(spec.ClusterIPs...)
	}
	if len(spec.ExternalIPs) > 0 {
		s.WithExternalIPs(spec.ExternalIPs...)
	}
	if spec.SessionAffinity != "" {
		s.WithSessionAffinity(spec.SessionAffinity)
	}
	if spec.SessionAffinityConfig != nil && spec.SessionAffinityConfig.ClientIP != nil {
		cip := corev1ac.ClientIPConfig()
		if spec.SessionAffinityConfig.ClientIP.TimeoutSeconds != nil {
			cip.WithTimeoutSeconds(*spec.SessionAffinityConfig.ClientIP.TimeoutSeconds)
		}
		s.WithSessionAffinityConfig(corev1ac.SessionAffinityConfig().WithClientIP(cip))
	}
	if spec.LoadBalancerIP != "" {
		s.WithLoadBalancerIP(spec.LoadBalancerIP)
	}
	if len(spec.LoadBalancerSourceRanges) > 0 {
		s.WithLoadBalancerSourceRanges(spec.LoadBalancerSourceRanges...)
	}
	if spec.ExternalTrafficPolicy != "" {
		s.WithExternalTrafficPolicy(spec.ExternalTrafficPolicy)
	}
	if spec.HealthCheckNodePort != 0 {
		s.WithHealthCheckNodePort(spec.HealthCheckNodePort)
	}
	if spec.PublishNotReadyAddresses {
		s.WithPublishNotReadyAddresses(true)
	}
	if len(spec.IPFamilies) > 0 {
		s.WithIPFamilies(spec.IPFamilies...)
	}
	if spec.IPFamilyPolicy != nil {
		s.WithIPFamilyPolicy(*spec.IPFamilyPolicy)
	}
	if spec.AllocateLoadBalancerNodePorts != nil {
		s.WithAllocateLoadBalancerNodePorts(*spec.AllocateLoadBalancerNodePorts)
	}
	if spec.LoadBalancerClass != nil {
		s.WithLoadBalancerClass(*spec.LoadBalancerClass)
	}
	if spec.InternalTrafficPolicy != nil {
		s.WithInternalTrafficPolicy(*spec.InternalTrafficPolicy)
	}
	if spec.TrafficDistribution != nil {
		s.WithTrafficDistribution(*spec.TrafficDistribution)
	}
	return out.WithSpec(s)
}

func desiredPort(p *corev1.ServicePort) *corev1ac.ServicePortApplyConfiguration {
	out := corev1ac.ServicePort().WithPort(p.Port).WithProtocol(p.Protocol).WithTargetPort(p.TargetPort)
	if p.Name != "" {
		out.WithName(p.Name)
	}
	if p.AppProtocol != nil {
		out.WithAppProtocol(*p.AppProtocol)
	}
	if p.NodePort != 0 {
		out.WithNodePort(p.NodePort)
	}
	return out
}

// propagated copies labels or annotations minus tool bookkeeping (and the
// label the controller sets itself).
func propagated(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		if k == lastAppliedAnnotation || k == swhv1alpha1.AnnotationAdopt || k == swhv1alpha1.LabelService {
			continue
		}
		out[k] = v
	}
	return out
}

// serviceUpToDate reports whether the fields fieldManager owns in existing
// already equal desired, so that applying would change nothing.
func serviceUpToDate(existing *corev1.Service, desired *corev1ac.ServiceApplyConfiguration, fieldManager string) (bool, error) {
	owned, err := corev1ac.ExtractService(existing, fieldManager)
	if err != nil {
		return false, fmt.Errorf("extracting the fields %s owns in Service %s/%s: %w", fieldManager, existing.Namespace, existing.Name, err)
	}
	// Extract leaves out what identifies the object; compare the rest.
	owned.WithName(*desired.Name).WithNamespace(*desired.Namespace)
	owned.Kind, owned.APIVersion = desired.Kind, desired.APIVersion
	return equality.Semantic.DeepEqual(owned, desired), nil
}

// ownedBy reports whether the Service's controller is the resource.
func ownedBy(svc *corev1.Service, swh *swhv1alpha1.ServiceWithHealthchecks) bool {
	for _, ref := range svc.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.UID == swh.UID {
			return true
		}
	}
	return false
}

// previousIncarnation returns the controller reference of a Service that
// belongs to an earlier ServiceWithHealthchecks of the same name: one with
// another UID. Names are unique in a namespace, so that object is gone; the
// garbage collector deletes what it owned.
func previousIncarnation(svc *corev1.Service, swh *swhv1alpha1.ServiceWithHealthchecks) *metav1.OwnerReference {
	ref := metav1.GetControllerOf(svc)
	if ref == nil || ref.Kind != "ServiceWithHealthchecks" || ref.Name != swh.Name || ref.UID == swh.UID {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != swhv1alpha1.GroupVersion.Group {
		return nil
	}
	return ref
}
