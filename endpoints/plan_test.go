package endpoints

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

var scope1 = Scope{Namespace: "ns", Service: "web", Node: "node1"}

// desiredFor builds the slices of Service web on node1 for pods passing on
// port http at the given IPs.
func desiredFor(t testing.TB, ips ...string) []discoveryv1.EndpointSlice {
	t.Helper()
	svc := testService(svcPort("http", 80, num(8080)))
	var pods []PodVerdicts
	for i, ip := range ips {
		pods = append(pods, PodVerdicts{testPod(fmt.Sprintf("p%d", i), []string{ip}), verdicts(pass(8080))})
	}
	out, err := Build(svc, node1, pods, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// foreign returns a copy of s as another party's slice.
func foreign(s discoveryv1.EndpointSlice, key, value string) discoveryv1.EndpointSlice {
	f := *serverRoundTripTB(s)
	f.Labels = maps.Clone(f.Labels)
	if value == "" {
		delete(f.Labels, key)
	} else {
		f.Labels[key] = value
	}
	return f
}

// serverRoundTripTB is a cheap stand-in for what the server returns.
func serverRoundTripTB(s discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := s.DeepCopy()
	out.ResourceVersion = "1"
	out.UID = types.UID("slice-" + s.Name)
	return out
}

// apply writes ch onto existing, as the agent would, and returns the result.
func apply(existing []discoveryv1.EndpointSlice, ch Changes) []discoveryv1.EndpointSlice {
	key := func(s discoveryv1.EndpointSlice) string { return s.Namespace + "/" + s.Name }
	byName := make(map[string]discoveryv1.EndpointSlice)
	for _, s := range existing {
		byName[key(s)] = s
	}
	for _, s := range ch.Create {
		byName[key(s)] = *serverRoundTripTB(s)
	}
	for _, s := range ch.Update {
		byName[key(s)] = *serverRoundTripTB(s)
	}
	for _, s := range ch.Delete {
		delete(byName, key(s))
	}
	var out []discoveryv1.EndpointSlice
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, byName[n])
	}
	return out
}

func names(ss []discoveryv1.EndpointSlice) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func TestPlan(t *testing.T) {
	d := desiredFor(t, "10.0.0.1")[0]
	stale := *serverRoundTripTB(desiredFor(t, "10.0.0.9")[0])
	otherPort := *serverRoundTripTB(d)
	otherPort.Name = "web-old-node1"
	wrongFamily := *serverRoundTripTB(d)
	wrongFamily.AddressType = discoveryv1.AddressTypeIPv6
	tests := []struct {
		name                   string
		existing               []discoveryv1.EndpointSlice
		desired                []discoveryv1.EndpointSlice
		create, update, delete []string
		collisions             int
	}{
		{name: "nothing exists: create", desired: []discoveryv1.EndpointSlice{d}, create: []string{"web-http-node1"}},
		{name: "equal: nothing to do", existing: []discoveryv1.EndpointSlice{*serverRoundTripTB(d)}, desired: []discoveryv1.EndpointSlice{d}},
		{name: "changed: update", existing: []discoveryv1.EndpointSlice{stale}, desired: []discoveryv1.EndpointSlice{d}, update: []string{"web-http-node1"}},
		{name: "no longer desired: delete", existing: []discoveryv1.EndpointSlice{otherPort, *serverRoundTripTB(d)}, desired: []discoveryv1.EndpointSlice{d}, delete: []string{"web-old-node1"}},
		{name: "nothing desired: delete all of ours", existing: []discoveryv1.EndpointSlice{otherPort, stale}, delete: []string{"web-http-node1", "web-old-node1"}},
		{
			name:     "another Service's slices are never touched",
			existing: []discoveryv1.EndpointSlice{foreign(otherPort, discoveryv1.LabelServiceName, "api")},
		},
		{
			name:     "another manager's slices are never touched",
			existing: []discoveryv1.EndpointSlice{foreign(otherPort, discoveryv1.LabelManagedBy, "endpointslice-controller.k8s.io")},
		},
		{
			name:     "another node's slices are never touched",
			existing: []discoveryv1.EndpointSlice{foreign(otherPort, DefaultNodeLabel, "node2")},
		},
		{
			name:     "slices without our labels are never touched",
			existing: []discoveryv1.EndpointSlice{foreign(otherPort, discoveryv1.LabelManagedBy, "")},
		},
		{
			name:     "slices of another namespace are ignored",
			existing: []discoveryv1.EndpointSlice{func() discoveryv1.EndpointSlice { s := otherPort; s.Namespace = "other"; return s }()},
		},
		{
			name:       "a foreign slice holding the name: create under another name, report",
			existing:   []discoveryv1.EndpointSlice{foreign(d, discoveryv1.LabelServiceName, "web-http")},
			desired:    []discoveryv1.EndpointSlice{d},
			create:     []string{freeName("web-http-node1", "web/node1", func(string) bool { return false })},
			collisions: 1,
		},
		{
			name:       "our slice with another address type: replaced under another name",
			existing:   []discoveryv1.EndpointSlice{wrongFamily},
			desired:    []discoveryv1.EndpointSlice{d},
			create:     []string{freeName("web-http-node1", "web/node1", func(string) bool { return false })},
			delete:     []string{"web-http-node1"},
			collisions: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := Plan(scope1, tt.existing, tt.desired, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := names(ch.Create); !slices.Equal(got, nonNil(tt.create)) {
				t.Errorf("create %v, want %v", got, tt.create)
			}
			if got := names(ch.Update); !slices.Equal(got, nonNil(tt.update)) {
				t.Errorf("update %v, want %v", got, tt.update)
			}
			if got := names(ch.Delete); !slices.Equal(got, nonNil(tt.delete)) {
				t.Errorf("delete %v, want %v", got, tt.delete)
			}
			if len(ch.Collisions) != tt.collisions {
				t.Errorf("collisions %v, want %d", ch.Collisions, tt.collisions)
			}
			if ch.Empty() != (len(tt.create)+len(tt.update)+len(tt.delete) == 0) {
				t.Error("Empty disagrees")
			}
			rounds := 1
			if tt.name == "our slice with another address type: replaced under another name" {
				rounds = 2
			}
			checkConverges(t, scope1, tt.existing, tt.desired, Options{}, rounds)
		})
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// TestPlanUpdateKeepsMetadata checks that an update carries the desired
// content on the existing object: resourceVersion for optimistic
// concurrency, others' labels and annotations.
func TestPlanUpdateKeepsMetadata(t *testing.T) {
	existing := *serverRoundTripTB(desiredFor(t, "10.0.0.9")[0])
	existing.ResourceVersion = "77"
	existing.Labels["team"] = "a"
	existing.Labels["service.kubernetes.io/headless"] = ""
	existing.Annotations = map[string]string{"note": "x"}
	desired := desiredFor(t, "10.0.0.1")
	desired[0].Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: "t"}
	ch, err := Plan(scope1, []discoveryv1.EndpointSlice{existing}, desired, Options{})
	if err != nil || len(ch.Update) != 1 {
		t.Fatalf("%+v, %v", ch, err)
	}
	u := ch.Update[0]
	if u.ResourceVersion != "77" || u.UID != existing.UID || u.Labels["team"] != "a" || u.Annotations["note"] != "x" ||
		u.Annotations[corev1.EndpointsLastChangeTriggerTime] != "t" {
		t.Errorf("metadata lost: %+v", u.ObjectMeta)
	}
	if _, ok := u.Labels["service.kubernetes.io/headless"]; ok {
		t.Error("the headless label the Service no longer has stays")
	}
	if !UpToDate(&u, &desired[0]) {
		t.Error("the update does not carry the desired content")
	}
	if existing.Labels["team"] != "a" || existing.Endpoints[0].Addresses[0] != "10.0.0.9" {
		t.Error("Plan modified its input")
	}
}

// TestPlanCollisionStable: once renamed, the slice stays under its new name
// while the foreign slice holds the plain one, and returns to the plain name
// when it is free.
func TestPlanCollisionStable(t *testing.T) {
	desired := desiredFor(t, "10.0.0.1")
	holder := foreign(desired[0], discoveryv1.LabelServiceName, "web-http")
	existing := []discoveryv1.EndpointSlice{holder}
	ch, err := Plan(scope1, existing, desired, Options{})
	if err != nil || len(ch.Create) != 1 || len(ch.Collisions) != 1 {
		t.Fatalf("%+v, %v", ch, err)
	}
	c := ch.Collisions[0]
	if c.Name != "web-http-node1" || c.Renamed != ch.Create[0].Name || c.HolderService != "web-http" ||
		c.HolderManagedBy != DefaultManagedBy || c.HolderNode != "node1" || !strings.Contains(c.String(), `service "web-http"`) {
		t.Errorf("collision %+v: %s", c, c)
	}
	if errs := validation.IsDNS1123Subdomain(c.Renamed); len(errs) > 0 {
		t.Error(errs)
	}
	existing = apply(existing, ch)
	again, err := Plan(scope1, existing, desired, Options{})
	if err != nil || !again.Empty() || len(again.Collisions) != 1 || again.Collisions[0].Renamed != c.Renamed {
		t.Fatalf("second plan %+v, %v", again, err)
	}
	// The holder goes away: back to the plain name.
	existing = slices.DeleteFunc(existing, func(s discoveryv1.EndpointSlice) bool { return s.Name == "web-http-node1" })
	back, err := Plan(scope1, existing, desired, Options{})
	if err != nil || !slices.Equal(names(back.Create), []string{"web-http-node1"}) || !slices.Equal(names(back.Delete), []string{c.Renamed}) {
		t.Fatalf("after the holder left: %+v, %v", back, err)
	}
}

func TestPlanDeterministic(t *testing.T) {
	desired := desiredFor(t, "10.0.0.1")
	existing := []discoveryv1.EndpointSlice{
		foreign(desired[0], discoveryv1.LabelManagedBy, "someone"),
		*serverRoundTripTB(desiredFor(t, "10.0.0.2")[0]),
	}
	existing[1].Name = "web-gone-node1"
	first, err := Plan(scope1, existing, desired, Options{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(existing)
	second, err := Plan(scope1, existing, desired, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("plans differ:\n%+v\n%+v", first, second)
	}
}

func TestPlanErrors(t *testing.T) {
	d := desiredFor(t, "10.0.0.1")
	tests := []struct {
		name    string
		scope   Scope
		desired []discoveryv1.EndpointSlice
		opts    Options
	}{
		{name: "empty scope", scope: Scope{Namespace: "ns", Service: "web"}, desired: d},
		{name: "desired of another Service", scope: Scope{Namespace: "ns", Service: "api", Node: "node1"}, desired: d},
		{name: "desired of another node", scope: Scope{Namespace: "ns", Service: "web", Node: "node2"}, desired: d},
		{name: "desired of another namespace", scope: Scope{Namespace: "x", Service: "web", Node: "node1"}, desired: d},
		{name: "desired of another manager", scope: scope1, desired: d, opts: Options{ManagedBy: "other"}},
		{name: "duplicate desired names", scope: scope1, desired: append(slices.Clone(d), d...)},
		{name: "invalid desired name", scope: scope1, desired: func() []discoveryv1.EndpointSlice {
			c := slices.Clone(d)
			c[0].Name = "Bad_Name"
			return c
		}()},
		{name: "invalid options", scope: scope1, opts: Options{MaxEndpointsPerSlice: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Plan(tt.scope, nil, tt.desired, tt.opts); !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

// checkConverges applies plans until one is empty, allowing at most rounds
// non-empty ones.
func checkConverges(t testing.TB, scope Scope, existing, desired []discoveryv1.EndpointSlice, opts Options, rounds int) {
	t.Helper()
	var log []string
	for round := range rounds + 1 {
		ch, err := Plan(scope, existing, desired, opts)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if ch.Empty() {
			return
		}
		log = append(log, fmt.Sprintf("round %d: existing %v: create %v update %v delete %v collisions %v",
			round, names(existing), names(ch.Create), names(ch.Update), names(ch.Delete), ch.Collisions))
		existing = apply(existing, ch)
	}
	t.Fatalf("no empty plan after %d rounds:\n%s", rounds, strings.Join(log, "\n"))
}

// FuzzPlan: whatever slices exist, Plan never updates or deletes a slice
// that is not of its scope, never creates over an existing name, gives every
// desired slice exactly one valid name, does not depend on the order of
// existing, and converges.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 1, 1, 0, 2, 2, 1, 2, 0, 1, 1, 3})
	f.Add([]byte{6, 5, 1, 0, 6, 0, 1, 7, 3, 0, 8, 4, 1, 2, 2, 0, 3, 1, 4, 9, 9})
	f.Add([]byte{8, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 1, 4, 1, 0, 5, 2, 1, 6, 3, 4, 0, 1, 2, 3})
	base := []string{"web-http-node1", "web-http-node1-v6", "web-smtp-node1", "web-node1"}
	pool := slices.Clone(base)
	for _, b := range base { // the first alternatives, to provoke chains
		for attempt := 1; attempt <= 2; attempt++ {
			n := 0
			pool = append(pool, freeName(b, "web/node1", func(string) bool { n++; return n < attempt }))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(b)
		}
		slice := func(name string) discoveryv1.EndpointSlice {
			s := desiredFor(t, fmt.Sprintf("10.0.0.%d", next()%4+1))[0]
			s.Name = name
			if next()%2 == 1 {
				s.AddressType = discoveryv1.AddressTypeIPv6 // content need not match: Plan does not look
			}
			return s
		}
		var existing []discoveryv1.EndpointSlice
		seen := map[string]bool{}
		for range next() % 9 {
			name := pool[next()%len(pool)]
			s := *serverRoundTripTB(slice(name))
			switch next() % 6 {
			case 1:
				s.Labels[discoveryv1.LabelServiceName] = "web-http"
			case 2:
				s.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
			case 3:
				s.Labels[DefaultNodeLabel] = "node2"
			case 4:
				s.Labels = nil
			case 5:
				s.Namespace = "other"
			}
			if k := s.Namespace + "/" + name; !seen[k] {
				seen[k] = true
				existing = append(existing, s)
			}
		}
		var desired []discoveryv1.EndpointSlice
		want := map[string]bool{}
		for range next() % 5 {
			name := pool[next()%len(pool)]
			if !want[name] {
				want[name] = true
				desired = append(desired, slice(name))
			}
		}
		ours := func(s *discoveryv1.EndpointSlice) bool {
			return s.Namespace == "ns" && s.Labels[discoveryv1.LabelServiceName] == "web" &&
				s.Labels[discoveryv1.LabelManagedBy] == DefaultManagedBy && s.Labels[DefaultNodeLabel] == "node1"
		}
		held := map[string]*discoveryv1.EndpointSlice{}
		for i := range existing {
			if existing[i].Namespace == "ns" {
				held[existing[i].Name] = &existing[i]
			}
		}
		var before []discoveryv1.EndpointSlice
		for i := range existing {
			before = append(before, *existing[i].DeepCopy())
		}

		ch, err := Plan(scope1, existing, desired, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(before, existing) {
			t.Fatal("Plan modified existing")
		}
		for _, s := range slices.Concat(ch.Update, ch.Delete) {
			h := held[s.Name]
			if h == nil || !ours(h) || s.Namespace != "ns" || s.UID != h.UID {
				t.Fatalf("touches %s/%s, which is not ours: %+v", s.Namespace, s.Name, h)
			}
		}
		for _, s := range ch.Create {
			if held[s.Name] != nil {
				t.Fatalf("creates %q over an existing slice", s.Name)
			}
		}
		published := map[string]bool{}
		for _, s := range slices.Concat(ch.Create, ch.Update) {
			if published[s.Name] || len(validation.IsDNS1123Subdomain(s.Name)) > 0 {
				t.Fatalf("name %q repeated or invalid", s.Name)
			}
			published[s.Name] = true
		}
		for _, s := range ch.Delete {
			if published[s.Name] {
				t.Fatalf("%q both written and deleted", s.Name)
			}
		}

		shuffled := slices.Clone(existing)
		slices.Reverse(shuffled)
		if again, err := Plan(scope1, shuffled, desired, Options{}); err != nil || !reflect.DeepEqual(again, ch) {
			t.Fatalf("plan depends on the order of existing: %v", err)
		}

		after := apply(existing, ch)
		for _, s := range existing {
			if !ours(&s) && s.Namespace == "ns" {
				i := slices.IndexFunc(after, func(a discoveryv1.EndpointSlice) bool { return a.Namespace == s.Namespace && a.Name == s.Name })
				if i < 0 || !reflect.DeepEqual(after[i], s) {
					t.Fatalf("foreign slice %q changed", s.Name)
				}
			}
		}
		// After the writes, every desired slice is published once, under
		// some name, and nothing else of ours is left.
		var mine []discoveryv1.EndpointSlice
		for _, s := range after {
			if ours(&s) {
				mine = append(mine, s)
			}
		}
		if len(mine) != len(desired) {
			t.Fatalf("%d desired, %d of ours after the writes: %v", len(desired), len(mine), names(mine))
		}
		for _, d := range desired {
			i := slices.IndexFunc(mine, func(s discoveryv1.EndpointSlice) bool {
				c := d.DeepCopy()
				c.Name = s.Name
				return UpToDate(&s, c)
			})
			if i < 0 {
				t.Fatalf("desired %q is not published", d.Name)
			}
			mine = slices.Delete(mine, i, i+1)
		}
		// Plans are stable once applied; a slice of ours that must change
		// address type takes more rounds, being replaced under another name.
		rounds := 1
		for _, s := range slices.Concat(existing, desired) {
			if ours(&s) && s.AddressType != discoveryv1.AddressTypeIPv4 {
				rounds = 3
			}
		}
		checkConverges(t, scope1, existing, desired, Options{}, rounds)
	})
}

// TestFreeNameLong: an alternative to a 253-character name stays within the
// limit and valid.
func TestFreeNameLong(t *testing.T) {
	long := strings.Repeat("a", 240) + "." + strings.Repeat("b", 12)
	got := freeName(long, "salt", func(string) bool { return false })
	if len(got) > 253 || len(validation.IsDNS1123Subdomain(got)) > 0 || !strings.HasPrefix(got, long[:244]+"-") {
		t.Errorf("freeName = %q (%d characters)", got, len(got))
	}
	tries := 0
	second := freeName("web", "salt", func(string) bool { tries++; return tries < 3 })
	// A cut that ends on "." or "-" loses it.
	if got := freeName(strings.Repeat("a", 243)+".b", "s", func(string) bool { return false }); !strings.HasPrefix(got, strings.Repeat("a", 243)+"-") {
		t.Errorf("freeName = %q", got)
	}
	if second == freeName("web", "salt", func(string) bool { return false }) || tries != 3 {
		t.Errorf("taken alternatives are skipped: %q after %d tries", second, tries)
	}
}

// TestPlanOwnedAnnotations: an owned annotation is content (a change, an
// addition or a removal is written, and others' annotations stay), while
// any other annotation, such as a per-write stamp, causes no write.
func TestPlanOwnedAnnotations(t *testing.T) {
	const owned, stamp, others = "example.com/why", "example.com/stamp", "someone.else/note"
	opts := Options{OwnedAnnotations: []string{owned}}
	with := func(s discoveryv1.EndpointSlice, kv ...string) discoveryv1.EndpointSlice {
		s = *s.DeepCopy()
		s.Annotations = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
		return s
	}
	base := desiredFor(t, "10.0.0.1")[0]
	for _, tc := range []struct {
		name            string
		existing        discoveryv1.EndpointSlice
		desired         discoveryv1.EndpointSlice
		wantUpdate      bool
		wantAnnotations map[string]string
	}{
		{"same owned value, different stamp", with(base, owned, "a", stamp, "t1"), with(base, owned, "a", stamp, "t2"), false, nil},
		{"neither has it", with(base, stamp, "t1"), with(base), false, nil},
		{"owned value changed", with(base, owned, "a", others, "x"), with(base, owned, "b"), true,
			map[string]string{owned: "b", others: "x"}},
		{"owned annotation added", with(base, others, "x"), with(base, owned, "a"), true,
			map[string]string{owned: "a", others: "x"}},
		{"owned annotation removed", with(base, owned, "a", others, "x"), with(base), true,
			map[string]string{others: "x"}},
		{"empty value is a value", with(base), with(base, owned, ""), true, map[string]string{owned: ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			existing := []discoveryv1.EndpointSlice{*serverRoundTripTB(tc.existing)}
			ch, err := Plan(scope1, existing, []discoveryv1.EndpointSlice{tc.desired}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(ch.Create) != 0 || len(ch.Delete) != 0 {
				t.Fatalf("plan creates %v and deletes %v, want neither", names(ch.Create), names(ch.Delete))
			}
			if got := len(ch.Update) == 1; got != tc.wantUpdate {
				t.Fatalf("update planned: %v, want %v", got, tc.wantUpdate)
			}
			if !tc.wantUpdate {
				return
			}
			if got := ch.Update[0].Annotations; !maps.Equal(got, tc.wantAnnotations) {
				t.Errorf("updated slice's annotations %v, want %v", got, tc.wantAnnotations)
			}
			again, err := Plan(scope1, apply(existing, ch), []discoveryv1.EndpointSlice{tc.desired}, opts)
			if err != nil || !again.Empty() {
				t.Errorf("plan after applying: %+v, %v; want nothing to write", again, err)
			}
		})
	}
	if _, err := Plan(scope1, nil, nil, Options{OwnedAnnotations: []string{"not a key!"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an invalid owned annotation key: %v, want ErrInvalid", err)
	}
}
