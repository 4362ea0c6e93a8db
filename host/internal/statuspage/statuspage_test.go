package statuspage

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/controller"
)

func render(t *testing.T, in Input) string {
	t.Helper()
	var b strings.Builder
	if err := Render(&b, in); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestPageShowsServerAPIMatrixWithSkewHighlighted(t *testing.T) {
	servers := discoverytest.SkewedControlPlane()
	servers[0].Healthy = false
	servers[2].ID = "<b>injected</b>"
	snap, err := discovery.ParseSnapshot(discoverytest.SnapshotJSON(42, servers))
	if err != nil {
		t.Fatal(err)
	}
	accepted := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	page := render(t, Input{
		Snapshot: snap, AcceptedAt: accepted, Now: accepted.Add(90 * time.Second), Ready: true,
		Addresses: map[string]string{"kube-a": "10.0.0.11:6443"},
	})
	for _, want := range []string{
		"generation <strong>42</strong>", "1m30s ago", "10.0.0.11:6443",
		`<span class="unhealthy">unhealthy</span>`, "v1.35.4", "v1.36.3",
		// Only kube-c serves coordination.k8s.io/v1alpha2: a skewed row with
		// two "not served" cells.
		`<tr class="skewed"><th class="api mono">coordination.k8s.io/v1alpha2</th><td class="cell missing">✗ not served</td><td class="cell missing">✗ not served</td><td class="cell served">✓ 1 resource</td></tr>`,
		// Every server serves apps/v1 identically.
		`<tr><th class="api mono">apps/v1</th>`,
		// admissionregistration.k8s.io/v1 exists everywhere but with
		// different resources.
		`<tr class="skewed"><th class="api mono">admissionregistration.k8s.io/v1</th>`,
		`<tr class="skewed"><th class="api mono">admissionregistration.k8s.io/v1/mutatingadmissionpolicies</th>`,
		`<tr><th class="api mono">core/v1/pods</th>`,
		"&lt;b&gt;injected&lt;/b&gt;",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(page, "<b>injected") {
		t.Error("a server ID was not escaped")
	}
	// Self-contained: no scripts, no external stylesheets, images or links.
	if strings.Contains(page, "<script") || regexp.MustCompile(`(src|href)="(https?:)?//`).MatchString(page) {
		t.Error("the page refers to external assets or runs scripts")
	}
}

func TestPageBeforeTheFirstSnapshotSaysSo(t *testing.T) {
	page := render(t, Input{Now: time.Now()})
	if !strings.Contains(page, "not ready") || !strings.Contains(page, "No discovery snapshot has been accepted yet") {
		t.Errorf("page:\n%s", page)
	}
}

func TestPageMarksTheNodeLocalPreferredServer(t *testing.T) {
	servers := discoverytest.SkewedControlPlane()
	snap, err := discovery.ParseSnapshot(discoverytest.Prefer(discoverytest.SnapshotJSON(7, servers), servers[1].ID))
	if err != nil {
		t.Fatal(err)
	}
	page := render(t, Input{Snapshot: snap, AcceptedAt: time.Now(), Now: time.Now(), Ready: true})
	if want := `<td class="mono">` + servers[1].ID + ` (local, preferred)</td>`; !strings.Contains(page, want) || strings.Count(page, "(local, preferred)") != 1 {
		t.Errorf("page does not mark only %s as the preferred server", servers[1].ID)
	}
}

func TestPageShowsWhereServersDifferInLabelsAndFields(t *testing.T) {
	servers := discoverytest.SkewedControlPlane()
	snap, err := discovery.ParseSnapshot(discoverytest.SnapshotJSON(9, servers))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := &snap.Servers[0], &snap.Servers[1], &snap.Servers[2]
	a.FieldSelectors = map[string][]string{"v1/pods": {"metadata.name", "metadata.namespace"}}
	b.FieldSelectors = map[string][]string{"v1/pods": {"metadata.name", "metadata.namespace", "spec.nodeName"}}
	c.FieldSelectors = map[string][]string{"v1/pods": {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"},
		"coordination.k8s.io/v1alpha2/leasecandidates": {"metadata.name"}}
	a.MissingFields = map[string][]string{"coordination.k8s.io/v1/leases": {"spec.<strategy>", "spec.preferredHolder"}}
	page := render(t, Input{Snapshot: snap, AcceptedAt: time.Now(), Now: time.Now(), Ready: true})
	for _, want := range []string{
		`<tr class="skewed"><th class="api mono">v1/pods</th><td class="mono">metadata.name, metadata.namespace</td>` +
			`<td class="cell missing">no others</td><td class="served">also: <span class="mono">spec.nodeName</span></td>` +
			`<td class="served">also: <span class="mono">spec.nodeName, status.phase</span></td></tr>`,
		`<th class="api mono">coordination.k8s.io/v1alpha2/leasecandidates</th><td class="mono">metadata.name</td>` +
			`<td class="cell">not served</td><td class="cell">not served</td><td class="cell missing">no others</td></tr>`,
		`<tr class="skewed"><th class="api mono">coordination.k8s.io/v1/leases</th>` +
			`<td class="missing">lacks: <span class="mono">spec.&lt;strategy&gt;, spec.preferredHolder</span></td>` +
			`<td class="cell served">has every field</td><td class="cell served">has every field</td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}

	for i := range snap.Servers {
		snap.Servers[i].FieldSelectors, snap.Servers[i].MissingFields = nil, nil
	}
	page = render(t, Input{Snapshot: snap, AcceptedAt: time.Now(), Now: time.Now(), Ready: true})
	for _, want := range []string{"accepts the same field-selector labels", "No healthy server's schema of a resource lacks a field"} {
		if !strings.Contains(page, want) {
			t.Errorf("page without field-level differences lacks %q", want)
		}
	}
}

func TestPageShowsWhichServersSchemasHaveEachFieldPathThatDiffers(t *testing.T) {
	servers, skew := discoverytest.WithBothWayFieldSkew(discoverytest.SkewedControlPlane())
	snap, err := discovery.ParseSnapshot(discoverytest.SnapshotJSON(9, servers))
	if err != nil {
		t.Fatal(err)
	}
	snap.FieldSkew = skew
	// kube-c's schema of mutating admission policies was not compared, and
	// kube-a does not serve them.
	snap.FieldSkew["admissionregistration.k8s.io/v1/mutatingadmissionpolicies"] = discovery.FieldSkew{
		Paths:   []string{"spec.<matchConditions>"},
		Schemas: []discovery.FieldSchema{{Servers: []int{1}, Knows: []int{0}}},
	}
	if err := snap.Validate(); err != nil {
		t.Fatal(err)
	}
	page := render(t, Input{Snapshot: snap, AcceptedAt: time.Now(), Now: time.Now(), Ready: true})
	for _, want := range []string{
		`<tr class="skewed"><th class="api mono" colspan="4">admissionregistration.k8s.io/v1/mutatingadmissionpolicies</th></tr>` + "\n" +
			`<tr><td class="mono">spec.&lt;matchConditions&gt;</td><td class="cell">not served</td><td class="cell served">✓ has</td><td class="cell">not compared</td></tr>` + "\n" +
			`<tr class="skewed"><th class="api mono" colspan="4">apps/v1/deployments</th></tr>` + "\n" +
			`<tr><td class="mono">spec.template.spec.schedulingGroup</td><td class="cell missing">✗ lacks</td><td class="cell served">✓ has</td><td class="cell served">✓ has</td></tr>` + "\n" +
			`<tr><td class="mono">spec.template.spec.workloadRef</td><td class="cell served">✓ has</td><td class="cell missing">✗ lacks</td><td class="cell missing">✗ lacks</td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}

	snap.FieldSkew = nil
	page = render(t, Input{Snapshot: snap, AcceptedAt: time.Now(), Now: time.Now(), Ready: true})
	if want := "names no field path that one server's schema has and another's lacks"; !strings.Contains(page, want) {
		t.Errorf("page without field skew lacks %q", want)
	}
}

func TestPageShowsWhereEachMemberComesFromAndWhereTheListAndTheClusterDiffer(t *testing.T) {
	servers := discoverytest.SkewedControlPlane()
	servers[2].Healthy = false
	snap, err := discovery.ParseSnapshot(discoverytest.SnapshotJSON(5, servers))
	if err != nil {
		t.Fatal(err)
	}
	members := &controller.Members{
		Membership: controller.MembershipCluster, Cluster: true, ClusterRead: true,
		Servers: []controller.Member{
			{Address: "10.0.0.11:6443", ID: "apiserver-aaa", Sources: []controller.Source{controller.SourceListed, controller.SourceLease, controller.SourceEndpointSlice}},
			{Address: "10.0.0.12:6443", ID: "apiserver-bbb", Sources: []controller.Source{controller.SourceEndpointSlice}},
			{Address: "10.0.0.14:6443", ID: "apiserver-<new>", Sources: []controller.Source{controller.SourceLease}},
		},
		// kube-c was listed and is not in the cluster: it is no member, and
		// leaves the snapshot after the grace period.
		ListedNotInCluster: []string{"10.0.0.13:6443"},
		InClusterNotListed: []string{"10.0.0.12:6443", "10.0.0.14:6443"},
	}
	in := Input{Snapshot: snap, AcceptedAt: time.Now(), Now: time.Now(), Ready: true, Members: members,
		Addresses: map[string]string{"kube-a": "10.0.0.11:6443", "kube-b": "10.0.0.12:6443", "kube-c": "10.0.0.13:6443"}}
	page := render(t, in)
	for _, want := range []string{
		"<th>Health</th><th>Source</th></tr>",
		`<td class="mono">10.0.0.11:6443</td><td>v1.35.4</td><td><span class="healthy">healthy</span></td><td>--apiserver, identity Lease, EndpointSlice</td></tr>`,
		`<td class="mono">10.0.0.12:6443</td><td>v1.36.3</td><td><span class="healthy">healthy</span></td><td>EndpointSlice</td></tr>`,
		`<td class="mono">10.0.0.13:6443</td><td>v1.36.3</td><td><span class="unhealthy">unhealthy</span></td><td><span class="unhealthy">no member: not routed to, leaves after the grace period</span></td></tr>`,
		"<h2>Membership</h2>\n<p class=\"summary\">The API servers are the cluster&#39;s",
		`<tr><td class="mono">10.0.0.13:6443</td><td class="unhealthy">listed but not in the cluster</td><td>no</td></tr>`,
		`<tr><td class="mono">10.0.0.12:6443</td><td class="unhealthy">in the cluster but not listed</td><td>yes</td></tr>`,
		// A member that joined and has not been ready is in no snapshot yet.
		`<tr><td class="mono">apiserver-&lt;new&gt;</td><td class="mono">10.0.0.14:6443</td><td>identity Lease</td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}

	for _, tc := range []struct {
		name    string
		members controller.Members
		says    string
	}{
		{"no cluster", controller.Members{}, "no cluster is read (--kubeconfig)"},
		{"cluster not read yet", controller.Members{Cluster: true}, "The cluster&#39;s membership has not been read yet: the servers --apiserver lists are used until it is."},
		{"listed membership", controller.Members{Membership: controller.MembershipListed, Cluster: true, ClusterRead: true}, "(--apiserver-membership=listed)"},
	} {
		in.Members = &tc.members
		if page := render(t, in); !strings.Contains(page, tc.says) || strings.Contains(page, "<th>Difference</th>") {
			t.Errorf("%s: the page does not say %q, or shows differences", tc.name, tc.says)
		}
	}
	// Before the first snapshot, the membership says why none came yet.
	if page := render(t, Input{Now: time.Now(), Members: &controller.Members{Cluster: true}}); !strings.Contains(page, "has not been read yet") {
		t.Error("the page before the first snapshot does not say the cluster has not been read")
	}
}
