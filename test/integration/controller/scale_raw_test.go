package controller_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// clientLimits are the controller binary's defaults that bound its writes.
type clientLimits struct {
	qps     float32
	burst   int
	workers int
}

// controllerLimits reads the defaults of --kube-api-qps, --kube-api-burst
// and --max-concurrent-reconciles from the binary's usage, so that the raw
// client keeps up with the binary the run measures.
func controllerLimits(bin string) (clientLimits, error) {
	out, _ := exec.Command(bin, "-h").CombinedOutput() // usage, then exit status 0 or 2
	defaults := map[string]string{}
	flag := ""
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			flag = strings.Fields(rest)[0]
			continue
		}
		if m := defaultRE.FindStringSubmatch(line); m != nil && flag != "" {
			defaults[flag] = m[1]
		}
	}
	var l clientLimits
	qps, err := strconv.ParseFloat(defaults["kube-api-qps"], 32)
	if err != nil {
		return l, fmt.Errorf("the default of --kube-api-qps in %s -h: %w", bin, err)
	}
	l.qps = float32(qps)
	if l.burst, err = strconv.Atoi(defaults["kube-api-burst"]); err != nil {
		return l, fmt.Errorf("the default of --kube-api-burst in %s -h: %w", bin, err)
	}
	if l.workers, err = strconv.Atoi(defaults["max-concurrent-reconciles"]); err != nil {
		return l, fmt.Errorf("the default of --max-concurrent-reconciles in %s -h: %w", bin, err)
	}
	return l, nil
}

var defaultRE = regexp.MustCompile(`\(default ([^)]*)\)\s*$`)

// rawClient makes, for one resource, the writes the controller makes: the
// server-side apply of the child Service (same field manager, same
// content), the status update, the event. Like the controller's, it is a
// controller-runtime client on a rest.Config with the controller's QPS and
// burst: client-go's token bucket, one per kind (controller-runtime makes
// a REST client per kind, and the controller's event recorder has a
// client of its own).
type rawClient struct {
	c client.Client
	// instance is the events' reportingInstance, as the recorder sets it.
	instance string
	// writes counts the write requests sent, at the transport.
	writes atomic.Int64
}

func newRawClient(cp *harness.ControlPlane, limits clientLimits) (*rawClient, error) {
	r := &rawClient{}
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = limits.qps, limits.burst
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countWrites{next: rt, n: &r.writes} })
	c, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the raw client: %w", err)
	}
	r.c = c
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("reading the host name: %w", err)
	}
	r.instance = app.FieldOwner + "-" + host
	return r, nil
}

// write makes the writes of one resource, as it was created.
func (r *rawClient) write(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) error {
	svc := rawService(swh)
	if err := r.c.Apply(ctx, svc, client.FieldOwner(app.FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying Service %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	if svc.Spec == nil || svc.Spec.ClusterIP == nil || *svc.Spec.ClusterIP == "" {
		return fmt.Errorf("applying Service %s/%s: the answer has no cluster IP", swh.Namespace, swh.Name)
	}
	updated := swh.DeepCopy()
	updated.Status = rawStatus(swh, svc)
	if err := r.c.Status().Update(ctx, updated); err != nil {
		return fmt.Errorf("updating the status of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	if err := r.c.Create(ctx, r.event(swh)); err != nil {
		return fmt.Errorf("creating the event of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	return nil
}

// rawService is the controller's apply configuration of the child Service
// (reconciler.desiredService) for what the benchmark's resources set:
// ports, type and session affinity (the CRD's defaults), no labels or
// annotations of their own. sameWrites checks it against the controller's.
func rawService(swh *swhv1alpha1.ServiceWithHealthchecks) *corev1ac.ServiceApplyConfiguration {
	spec := swh.Spec.ServiceSpec()
	s := corev1ac.ServiceSpec()
	for _, p := range spec.Ports {
		port := corev1ac.ServicePort().WithPort(p.Port).WithProtocol(p.Protocol).WithTargetPort(p.TargetPort)
		if p.Name != "" {
			port.WithName(p.Name)
		}
		s.WithPorts(port)
	}
	if spec.Type != "" {
		s.WithType(spec.Type)
	}
	if spec.SessionAffinity != "" {
		s.WithSessionAffinity(spec.SessionAffinity)
	}
	return corev1ac.Service(swh.Name, swh.Namespace).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(swhv1alpha1.GroupVersion.String()).
			WithKind("ServiceWithHealthchecks").
			WithName(swh.Name).
			WithUID(swh.UID).
			WithController(true).
			WithBlockOwnerDeletion(true)).
		WithLabels(map[string]string{swhv1alpha1.LabelService: swh.Name}).
		WithSpec(s)
}

// rawStatus is the status the controller writes for a resource whose
// Service was just applied and which no agent publishes yet.
func rawStatus(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1ac.ServiceApplyConfiguration) swhv1alpha1.ServiceWithHealthchecksStatus {
	st := swhv1alpha1.ServiceWithHealthchecksStatus{
		ObservedGeneration: swh.Generation,
		ClusterIP:          *svc.Spec.ClusterIP,
		ClusterIPs:         svc.Spec.ClusterIPs,
		Ready:              "0/0",
	}
	for _, p := range swh.Spec.Ports {
		st.Ports = append(st.Ports, swhv1alpha1.PortStatus{Name: p.Name, Port: p.Port, Protocol: cmp.Or(p.Protocol, corev1.ProtocolTCP)})
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: swhv1alpha1.ConditionEndpointsAvailable, Status: metav1.ConditionFalse, ObservedGeneration: swh.Generation,
		Reason: swhv1alpha1.ReasonNoEndpoints, Message: "no pod is published yet",
	})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: swhv1alpha1.ConditionServiceSynced, Status: metav1.ConditionTrue, ObservedGeneration: swh.Generation,
		Reason: swhv1alpha1.ReasonSynced, Message: fmt.Sprintf("Service %s matches the spec", swh.Name),
	})
	return st
}

// event is the event the controller's recorder (client-go's events API)
// makes when the child Service is first synced.
func (r *rawClient) event(swh *swhv1alpha1.ServiceWithHealthchecks) *eventsv1.Event {
	now := time.Now()
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: swh.Namespace, Name: fmt.Sprintf("%v.%x", swh.Name, now.UnixNano())},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: app.FieldOwner,
		ReportingInstance:   r.instance,
		Action:              "SyncService",
		Reason:              swhv1alpha1.ReasonSynced,
		Regarding: corev1.ObjectReference{
			APIVersion: swhv1alpha1.GroupVersion.String(), Kind: "ServiceWithHealthchecks",
			Namespace: swh.Namespace, Name: swh.Name, UID: swh.UID, ResourceVersion: swh.ResourceVersion,
		},
		Note: fmt.Sprintf("Service %s matches the spec", swh.Name),
		Type: corev1.EventTypeNormal,
	}
}

// countWrites counts the write requests going through it.
type countWrites struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c *countWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	if slices.Contains(writeMethods, req.Method) {
		c.n.Add(1)
	}
	return c.next.RoundTrip(req)
}

// written is what a phase wrote on one resource, without what differs
// between two control planes (UIDs, cluster IPs, times): the fields the
// field manager owns on the Service, the Service's managers, the status,
// the events.
type written struct {
	svc      *corev1ac.ServiceApplyConfiguration
	managers []string
	status   swhv1alpha1.ServiceWithHealthchecksStatus
	events   []string
}

// readWritten reads what was written on the resource name of ns.
func readWritten(ctx context.Context, cp *harness.ControlPlane, ns, name string) (written, error) {
	var w written
	svc := &corev1.Service{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		return w, fmt.Errorf("reading Service %s/%s: %w", ns, name, err)
	}
	var err error
	if w.svc, err = corev1ac.ExtractService(svc, app.FieldOwner); err != nil {
		return w, fmt.Errorf("extracting the fields of %s/%s: %w", ns, name, err)
	}
	for i := range w.svc.OwnerReferences {
		w.svc.OwnerReferences[i].UID = nil
	}
	for _, mf := range svc.ManagedFields {
		w.managers = append(w.managers, fmt.Sprintf("%s/%s/%s", mf.Manager, mf.Operation, mf.Subresource))
	}
	slices.Sort(w.managers)
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swh); err != nil {
		return w, fmt.Errorf("reading %s/%s: %w", ns, name, err)
	}
	w.status = *swh.Status.DeepCopy()
	w.status.ClusterIP, w.status.ClusterIPs = "", nil
	for i := range w.status.Conditions {
		w.status.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	events := &corev1.EventList{}
	if err := cp.Client.List(ctx, events, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": name}); err != nil {
		return w, fmt.Errorf("listing the events of %s/%s: %w", ns, name, err)
	}
	for _, e := range events.Items {
		w.events = append(w.events, strings.Join([]string{e.Type, e.Reason, e.Action, e.Message, e.ReportingController, e.ReportingInstance, e.InvolvedObject.Kind, e.InvolvedObject.APIVersion}, " | "))
	}
	slices.Sort(w.events)
	return w, nil
}

// sameWrites reports how what the controller wrote on a resource and what
// the raw client wrote on its counterpart differ.
func sameWrites(c, r written) error {
	var errs []error
	if !equality.Semantic.DeepEqual(c.svc, r.svc) {
		errs = append(errs, fmt.Errorf("the fields %s owns on the Service differ: controller %s, raw %s", app.FieldOwner, describe(c.svc), describe(r.svc)))
	}
	if !slices.Equal(c.managers, r.managers) {
		errs = append(errs, fmt.Errorf("the Service's field managers differ: controller %v, raw %v", c.managers, r.managers))
	}
	if !equality.Semantic.DeepEqual(c.status, r.status) {
		errs = append(errs, fmt.Errorf("the statuses differ: controller %+v, raw %+v", c.status, r.status))
	}
	if !slices.Equal(c.events, r.events) {
		errs = append(errs, fmt.Errorf("the events differ: controller %q, raw %q", c.events, r.events))
	}
	return errors.Join(errs...)
}

func describe(v any) string {
	s := fmt.Sprintf("%+v", v)
	if ac, ok := v.(*corev1ac.ServiceApplyConfiguration); ok && ac.Spec != nil {
		s = fmt.Sprintf("%+v spec %+v", ac.ObjectMetaApplyConfiguration, *ac.Spec)
	}
	return s
}

// accessConfigMap describes the ConfigMap of registered Services the
// controller's access reconciler keeps in the namespace.
func accessConfigMap(ctx context.Context, cp *harness.ControlPlane, n int) string {
	cm := &corev1.ConfigMap{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: scaleNamespace, Name: "swh-services"}, cm); err != nil {
		return fmt.Sprintf("not read: %v", err)
	}
	size := 0
	for k, v := range cm.Data {
		size += len(k) + len(v)
	}
	whole, err := json.Marshal(cm)
	if err != nil {
		return fmt.Sprintf("not encoded: %v", err)
	}
	return fmt.Sprintf("registers %d of %d Services: data %d KiB, %d owner references, %d KiB as JSON with its managed fields, written anew on each change",
		len(cm.Data), n, size/1024, len(cm.OwnerReferences), len(whole)/1024)
}
