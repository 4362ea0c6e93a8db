package controller

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

func TestRefusedSnapshotIsOfferedAgainUntilAccepted(t *testing.T) {
	pki := newTestPKI(t)
	plane := discoverytest.SkewedControlPlane()
	a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
	const refusals = 3
	var ctrl atomic.Pointer[Controller]
	var readyWhileOffered []bool
	rec := &recorder{refuse: refusals, onOffer: func(*discovery.Snapshot) {
		readyWhileOffered = append(readyWhileOffered, ctrl.Load().Ready())
	}}
	c, err := New(testOptions(pki, rec, a))
	if err != nil {
		t.Fatal(err)
	}
	ctrl.Store(c)
	run(t, c)

	waitUntil(t, "Ready", c.Ready)
	offers := rec.all()
	if len(offers) != refusals+1 {
		t.Fatalf("%d offers, want %d refused and one accepted", len(offers), refusals)
	}
	for i, o := range offers {
		if o.snap.Generation != 1 || !bytes.Equal(o.raw, offers[0].raw) {
			t.Errorf("offer %d: generation %d, want the same first snapshot again", i, o.snap.Generation)
		}
		if readyWhileOffered[i] {
			t.Errorf("offer %d: Ready before any snapshot was accepted", i)
		}
	}
	if got := metricValue(t, c, "skewgate_controller_publish_errors_total"); got != refusals {
		t.Errorf("publish errors = %v, want %d", got, refusals)
	}
	raw, _ := c.Current()
	if !bytes.Equal(raw, offers[0].raw) {
		t.Error("Current is not the accepted snapshot")
	}
}

func TestRunTwiceIsRefused(t *testing.T) {
	pki := newTestPKI(t)
	plane := discoverytest.SkewedControlPlane()
	a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
	c := startController(t, testOptions(pki, &recorder{}, a))
	waitUntil(t, "the first Run to publish", c.Ready)
	// Bounded, so that a second Run that wrongly starts cannot hang the test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Run(ctx); err == nil || !strings.Contains(err.Error(), "Run called twice") {
		t.Errorf("second Run = %v, want an error", err)
	}
}

// completeServer is a server state with documents, as a probe leaves it.
func completeServer(id string, healthy bool, apis, core []byte) *serverState {
	s := &serverState{address: id + ":6443", id: id, cluster: "cluster-" + id, version: "v1.36.3", healthy: healthy}
	var err error
	if s.apis.value, err = discovery.ParseGroupList(apis); err != nil {
		panic(err)
	}
	if s.core.value, err = discovery.ParseGroupList(core); err != nil {
		panic(err)
	}
	s.apis.ok, s.core.ok = true, true
	s.apis.etag, s.core.etag = etagOf(apis), etagOf(core)
	return s
}

func TestSnapshotServersAreSortedByIDAndCappedAtMaxServers(t *testing.T) {
	apis := discoverytest.GroupListJSON(discoverytest.SkewedControlPlane()[0].Groups, false)
	core := discoverytest.GroupListJSON(discoverytest.SkewedControlPlane()[0].Groups, true)
	c := &Controller{servers: map[string]*serverState{}, notices: newNotices(discardLogger())}
	for i := range discovery.MaxServers + 6 {
		s := completeServer(fmt.Sprintf("apiserver-%03d", discovery.MaxServers+5-i), true, apis, core)
		c.servers[s.address] = s
	}
	incomplete := completeServer("apiserver-000-no-version", true, apis, core)
	incomplete.version = ""
	c.servers[incomplete.address] = incomplete

	got := c.snapshotServers()
	if len(got) != discovery.MaxServers {
		t.Fatalf("%d servers, want %d", len(got), discovery.MaxServers)
	}
	for i, s := range got {
		if want := fmt.Sprintf("apiserver-%03d", i); s.id != want {
			t.Fatalf("server %d = %s, want %s", i, s.id, want)
		}
	}
}

func TestEncodedSnapshotEmbedsDocumentsByteForByte(t *testing.T) {
	// Indentation and characters encoding/json would escape must survive;
	// the whitespace around a document is not part of it.
	apis := []byte("{\n  \"kind\": \"APIGroupDiscoveryList\",\n  \"items\": [{\"metadata\": {\"name\": \"a<b>&c.example\"}, \"versions\": [{\"version\": \"v1\"}]}]\n}\n")
	core := []byte(`{"items":[{"metadata":{},"versions":[{"version":"v1","resources":[{"resource":"pods","scope":"Namespaced","verbs":null}]}]}]}`)
	servers := []*serverState{completeServer("apiserver-a", true, apis, core), completeServer("apiserver-b", false, apis, core)}
	c := &Controller{log: discardLogger(), metrics: newMetrics(), schemas: newSchemas()}
	p := c.build(servers, c.unnumbered(servers))
	if p == nil {
		t.Fatal("snapshot did not validate")
	}
	if !bytes.Contains(p.Raw, bytes.TrimSpace(apis)) || !bytes.Contains(p.Raw, core) {
		t.Errorf("documents altered in %s", p.Raw)
	}
	if p.Snapshot.Generation != 1 || len(p.Snapshot.Servers) != 2 || p.Snapshot.Servers[1].Healthy {
		t.Errorf("parsed snapshot = %+v", p.Snapshot)
	}
	if got := p.Snapshot.Servers[0].APIs.Items[0].Name(); got != "a<b>&c.example" {
		t.Errorf("group name = %q", got)
	}
}
