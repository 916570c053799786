package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

func postgresProbe(query, secret string) swhv1alpha1.Probe {
	return swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModePostgreSQL, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
		PostgreSQL: &swhv1alpha1.PostgreSQLProbe{TargetPort: intstr.FromString("postgres"), DBName: "postgres", Query: query,
			AuthSecretName: secret, TLSMode: swhv1alpha1.PostgreSQLTLSDisable}}
}

func dbPod(t *testing.T, ns, name, node, ip string) {
	t.Helper()
	if _, err := harness.CreatePod(context.Background(), controlPlane.Client, harness.PodOptions{
		Namespace: ns, Name: name, Node: node, Labels: map[string]string{"app": "db"}, IPs: []string{ip},
		Ports: []corev1.ContainerPort{{Name: "postgres", ContainerPort: 5432}},
	}); err != nil {
		t.Fatal(err)
	}
}

func credentials(t *testing.T, ns, name string, pg *harness.Postgres) {
	t.Helper()
	o := pg.Options()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		StringData: map[string]string{"user": o.User, "password": o.Password}}
	if err := controlPlane.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseReadWrite is the database example (docs/examples/database.yaml) on a
// real primary and streaming replica: db-write follows the primary through
// a promotion, db-read spreads over every healthy member.
func TestDatabaseReadWrite(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	ns := namespace(t)
	primary, replicas := replicated(t, ns, nodeB)
	replica := replicas[0]
	port := []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}
	for name, query := range map[string]string{"db-read": "SELECT 1", "db-write": "SELECT NOT pg_is_in_recovery()"} {
		swh := resource(ns, name, port, postgresProbe(query, "db-credentials"))
		swh.Spec.Selector = map[string]string{"app": "db"}
		if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
			t.Fatal(err)
		}
	}
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:TTF", "db-read-node-b": "db-1:TTF"})
	waitPublished(t, ns, "db-write", map[string]string{"db-write-node-a": "db-0:TTF", "db-write-node-b": "db-1:FFF"})

	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "db-write", map[string]string{"db-write-node-a": "db-0:FFF", "db-write-node-b": "db-1:TTF"})
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:FFF", "db-read-node-b": "db-1:TTF"})
}

// TestMissingSecretFailsTheProbeUntilCreated: a Secret that does not exist
// fails the probe with a reason and an event, never a crash; creating it
// lets the probe pass without restarting anything.
func TestMissingSecretFailsTheProbeUntilCreated(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	ip := harness.PodIP(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip})
	dbPod(t, ns, "db-0", nodeA, ip)
	swh := resource(ns, "late", []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromInt32(5432)}}, postgresProbe("SELECT 1", "late-credentials"))
	swh.Spec.Selector = map[string]string{"app": "db"}
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "late", map[string]string{"late-node-a": "db-0:FFF"})
	found := ""
	harness.Eventually(t, 30*time.Second, "a ProbeMisconfigured event naming the missing Secret", func() error {
		events := &eventsv1.EventList{}
		if err := controlPlane.Client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Regarding.Name == "late" && e.Reason == "ProbeMisconfigured" {
				found = e.Note
			}
		}
		if found == "" {
			return fmt.Errorf("none yet")
		}
		return nil
	})
	if want := "Secret " + ns + "/late-credentials not found"; !contains(found, want) {
		t.Errorf("event %q does not say %q", found, want)
	}
	if contains(found, pg.Options().Password) {
		t.Errorf("event leaks the password: %q", found)
	}
	credentials(t, ns, "late-credentials", pg)
	waitPublished(t, ns, "late", map[string]string{"late-node-a": "db-0:TTF"})
}

// TestOversizeSecretValueFailsTheProbe: a caCert over the 64 KiB the agent
// keeps of it fails the probe with reason secret and an event naming the
// key and the bound, even with tlsMode disable, which ignores caCert;
// bringing it under the bound lets the probe pass.
func TestOversizeSecretValueFailsTheProbe(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	ip := harness.PodIP(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip})
	dbPod(t, ns, "db-0", nodeA, ip)
	o := pg.Options()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big-credentials"},
		Data: map[string][]byte{"user": []byte(o.User), "password": []byte(o.Password), "caCert": bytes.Repeat([]byte("x"), 64<<10+1)}}
	if err := controlPlane.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	swh := resource(ns, "big", []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}, postgresProbe("SELECT 1", "big-credentials"))
	swh.Spec.Selector = map[string]string{"app": "db"}
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitProbeFailure(t, ns, "big", `Secret `+ns+`/big-credentials: key "caCert" is 65537 bytes, more than the 65536 (64 KiB) the agent accepts`)
	waitPublished(t, ns, "big", map[string]string{"big-node-a": "db-0:FFF"})

	secret.Data["caCert"] = bytes.Repeat([]byte("x"), 64<<10)
	if err := controlPlane.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "big", map[string]string{"big-node-a": "db-0:TTF"})
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestSecretTLSModeIsHonoured: a Secret ported from the original product
// keeps tlsMode; without one in the spec, the probe uses it. A spec that
// sets one wins, and the conflict is one event, whose repeats the recorder
// folds; an invalid value fails the probe, naming the key (the pod that
// passed is kept published: the probe cannot run).
func TestSecretTLSModeIsHonoured(t *testing.T) {
	a := startAgent(t, nodeA)
	ns := namespace(t)
	ca, err := harness.NewCA("db-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := harness.NewCA("not-the-db-ca")
	if err != nil {
		t.Fatal(err)
	}
	ip := harness.PodIP(t)
	cert, err := ca.Issue(ip)
	if err != nil {
		t.Fatal(err)
	}
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip, TLS: cert})
	dbPod(t, ns, "db-0", nodeA, ip)
	o := pg.Options()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ported"},
		Data: map[string][]byte{"user": []byte(o.User), "password": []byte(o.Password), "tlsMode": []byte("verify-full"), "caCert": other.PEM}}
	if err := controlPlane.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	port := []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}
	create := func(name string, mode swhv1alpha1.PostgreSQLTLSMode) {
		t.Helper()
		probe := postgresProbe("SELECT 1", "ported")
		probe.PostgreSQL.TLSMode = mode
		swh := resource(ns, name, port, probe)
		swh.Spec.Selector = map[string]string{"app": "db"}
		if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
			t.Fatal(err)
		}
	}
	create("from-secret", "")
	create("pinned", swhv1alpha1.PostgreSQLTLSDisable)

	// verify-full against a CA that did not sign the server: no TLS would pass.
	waitPublished(t, ns, "from-secret", map[string]string{"from-secret-node-a": "db-0:FFF"})
	waitPublished(t, ns, "pinned", map[string]string{"pinned-node-a": "db-0:TTF"})
	harness.Eventually(t, 10*time.Second, "PostgreSQL probes failing with reason tls", func() error {
		if n := a.metric(t, "swh_agent_probe_results_total", map[string]string{"mode": "PostgreSQL", "reason": "tls"}); n == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})

	// "disable" may have been stored by the old CRD's default: the note
	// says how to remove it.
	pinned := waitConflict(t, ns, "pinned", `sets tlsMode "disable" and Secret `+ns+`/ported holds tlsMode "verify-full"`)
	removal := `kubectl patch swh pinned -n ` + ns + ` --type=json -p '[{"op":"remove","path":"/spec/healthcheck/probes/0/postgreSQL/tlsMode"}]'`
	if !strings.Contains(pinned.Note, removal) {
		t.Errorf("the conflict of a spec's \"disable\" does not say %q: %q", removal, pinned.Note)
	}
	// Reconciles that change nothing tell it again, and the recorder folds
	// the repeats into the first event.
	for i := range 3 {
		pod := &corev1.Pod{}
		if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "db-0"}, pod); err != nil {
			t.Fatal(err)
		}
		pod.Annotations = map[string]string{"touch": fmt.Sprint(i)}
		if err := controlPlane.Client.Update(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	harness.Eventually(t, 20*time.Second, "the conflict told again, folded into its event", func() error {
		if events := conflicts(t, ns, "pinned"); len(events) != 1 || events[0].Series == nil || events[0].Series.Count < 2 {
			return fmt.Errorf("want one event with a series of at least 2, got %d: %v", len(events), events)
		}
		return nil
	})

	// The right CA: the Secret's verify-full passes.
	secret.Data["caCert"] = ca.PEM
	if err := controlPlane.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "from-secret", map[string]string{"from-secret-node-a": "db-0:TTF"})

	// A new conflict is a new report, not folded into the first one.
	secret.Data["tlsMode"] = []byte("require")
	if err := controlPlane.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitConflict(t, ns, "pinned", `Secret `+ns+`/ported holds tlsMode "require"`)
	if got := conflicts(t, ns, "pinned"); len(got) != 2 {
		t.Errorf("want the two conflicts as two events, got %v", got)
	}

	secret.Data["tlsMode"] = []byte("prefer")
	if err := controlPlane.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitProbeFailure(t, ns, "from-secret", `Secret `+ns+`/ported: key "tlsMode" is "prefer"`)
	// The probes cannot run: the pods that passed stay published, kept
	// (fail static), the key named in their reason.
	for _, name := range []string{"from-secret", "pinned"} {
		if r := waitReason(t, ns, name, "db-0", swhv1alpha1.ReasonFailStatic); !strings.Contains(r.Message, `key "tlsMode" is "prefer"`) {
			t.Errorf("%s: db-0 kept for %q, which does not name the key", name, r.Message)
		}
		waitPublished(t, ns, name, map[string]string{name + "-node-a": "db-0:TTF"})
	}

	// The patch the note gives applies and leaves tlsMode unset.
	patch := strings.TrimSuffix(removal[strings.Index(removal, "-p '")+len("-p '"):], "'")
	swh := &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pinned"}}
	if err := controlPlane.Client.Patch(context.Background(), swh, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		t.Fatalf("the patch %s: %v", patch, err)
	}
	if mode := swh.Spec.Healthcheck.Probes[0].PostgreSQL.TLSMode; mode != "" {
		t.Errorf("after the patch, tlsMode is %q", mode)
	}
}

// conflicts lists the TLSModeConflict events of a resource.
func conflicts(t *testing.T, ns, name string) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := controlPlane.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == "TLSModeConflict" {
			out = append(out, e)
		}
	}
	return out
}

// waitConflict waits for a TLSModeConflict event of the resource whose note
// contains note.
func waitConflict(t *testing.T, ns, name, note string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	harness.Eventually(t, 20*time.Second, "a TLSModeConflict event of "+name, func() error {
		var notes []string
		for _, e := range conflicts(t, ns, name) {
			if strings.Contains(e.Note, note) {
				found = e
				return nil
			}
			notes = append(notes, e.Note)
		}
		return fmt.Errorf("none says %q; notes: %q", note, notes)
	})
	return found
}

// waitProbeFailure waits until an event of the resource mentions what.
func waitProbeFailure(t *testing.T, ns, name, what string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("an event of %s saying %q", name, what), func() error {
		list := &eventsv1.EventList{}
		if err := controlPlane.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Name != name {
				continue
			}
			if strings.Contains(e.Note, what) {
				return nil
			}
			notes = append(notes, e.Note)
		}
		return fmt.Errorf("notes: %q", notes)
	})
}
