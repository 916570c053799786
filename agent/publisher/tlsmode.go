package publisher

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes/postgresql"
)

// validTLSMode reports whether a tlsMode, the CRD's or a Secret's, is an
// SSL mode of the prober. The CRD's field stays a string of the api module
// (its enum lists the same modes); the prober's type decides.
func validTLSMode(mode string) bool {
	return postgresql.SSLMode(mode).Validate() == nil
}

// tlsConflictEvents tells the database probes of a resource whose spec
// sets a tlsMode that differs from the one their Secret holds (the spec's
// is used), at every reconcile while it stands: the recorder folds the
// repeats (the action tells conflicts apart). It reads only
// what the probes already read: a Secret not read yet conflicts with
// nothing, and its first read brings the resource back here (see
// secretTLSModeChanged).
func (p *Publisher) tlsConflictEvents(swh *swhv1alpha1.ServiceWithHealthchecks) []event {
	if swh.Spec.Healthcheck == nil {
		return nil
	}
	var out []event
	for i := range swh.Spec.Healthcheck.Probes {
		probe := &swh.Spec.Healthcheck.Probes[i]
		specMode := specTLSMode(probe)
		if specMode == "" || probe.AuthSecretName() == "" {
			continue
		}
		secret := types.NamespacedName{Namespace: swh.Namespace, Name: probe.AuthSecretName()}
		mode, ok := p.probers.secrets.tlsMode(secret, swh.UID)
		if !ok || mode == specMode || !validTLSMode(mode) {
			// An invalid value fails the probe itself (reason secret).
			continue
		}
		related := &corev1.ObjectReference{Kind: "Secret", APIVersion: "v1", Namespace: secret.Namespace, Name: secret.Name}
		out = append(out, event{related: related, eventtype: corev1.EventTypeWarning, reason: swhv1alpha1.EventReasonTLSModeConflict,
			action: fmt.Sprintf("Probe%d/%s/%s", i, specMode, mode), note: tlsConflictNote(swh.Name, i, probe, secret, mode), standing: true})
	}
	return out
}

// specTLSMode is the tlsMode a database probe's spec sets: "" when it sets
// none or is not a database probe.
func specTLSMode(p *swhv1alpha1.Probe) string {
	switch {
	case p.PostgreSQL != nil:
		return string(p.PostgreSQL.TLSMode)
	case p.Redis != nil:
		return string(p.Redis.TLSMode)
	case p.MySQL != nil:
		return string(p.MySQL.TLSMode)
	}
	return ""
}

// tlsConflictNote says that probe i of resource name sets a tlsMode that
// differs from mode, the one its Secret holds. When a PostgreSQL probe's
// is disable, it may not be the user's: the CRD used to default tlsMode to
// disable on the server, so every resource created then stores it and the
// Secret's is never used. The note gives the patch that removes it.
func tlsConflictNote(name string, i int, probe *swhv1alpha1.Probe, secret types.NamespacedName, mode string) string {
	specMode := specTLSMode(probe)
	note := fmt.Sprintf("probe %d (%s) sets tlsMode %q and Secret %s holds tlsMode %q: the probe uses the spec's %q",
		i, probe.Describe(), specMode, secret, mode, specMode)
	if probe.PostgreSQL == nil || probe.PostgreSQL.TLSMode != swhv1alpha1.PostgreSQLTLSDisable {
		return note
	}
	return note + fmt.Sprintf(`. A resource created when the CRD defaulted tlsMode to "disable" stores it without the user setting it; to use the Secret's, remove it: `+
		`kubectl patch swh %s -n %s --type=json -p '[{"op":"remove","path":"/spec/healthcheck/probes/%d/postgreSQL/tlsMode"}]'`, name, secret.Namespace, i)
}

// secretTLSModeChanged brings back the resources whose probes set a tlsMode
// and read their credentials from a Secret whose tlsMode just changed (or
// was read for the first time), so that a conflict is reported.
func (p *Publisher) secretTLSModeChanged(secret types.NamespacedName) {
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	// The cache answers without the API server; the bound is for safety.
	ctx, cancel := context.WithTimeout(context.Background(), secretReadTimeout)
	defer cancel()
	if err := p.client.List(ctx, list, client.InNamespace(secret.Namespace)); err != nil {
		p.probers.secrets.log.Error(err, "listing the resources that use a Secret", "secret", secret.String())
		return
	}
	using := map[types.NamespacedName]bool{}
	for i := range list.Items {
		swh := &list.Items[i]
		if swh.Spec.Healthcheck == nil {
			continue
		}
		for i := range swh.Spec.Healthcheck.Probes {
			if probe := &swh.Spec.Healthcheck.Probes[i]; probe.AuthSecretName() == secret.Name && specTLSMode(probe) != "" {
				using[client.ObjectKeyFromObject(swh)] = true
			}
		}
	}
	for key := range using {
		p.notify(key)
	}
}
