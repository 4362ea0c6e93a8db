package controller

import (
	"bytes"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"

	"github.com/skewgate/skewgate/host/internal/devpki"
)

func TestFirstSnapshotCarriesEveryServerVerbatimAndMakesReady(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	plane := discoverytest.SkewedControlPlane()
	rec := &recorder{}
	c := startController(t, testOptions(pki, rec, a, b))

	waitUntil(t, "Ready", c.Ready)
	raw, snap := c.Current()
	if snap.Generation != 1 {
		t.Errorf("generation = %d, want 1", snap.Generation)
	}
	wantIDs := []string{ClusterName(a.address), ClusterName(b.address)}
	slices.Sort(wantIDs)
	if got := snapshotIDs(snap); !slices.Equal(got, wantIDs) {
		t.Fatalf("server IDs = %v, want %v (sorted)", got, wantIDs)
	}
	for _, tc := range []struct {
		srv     *fakeAPIServer
		version string
	}{{a, plane[0].Version}, {b, plane[1].Version}} {
		s := serverByID(snap, ClusterName(tc.srv.address))
		if s.Cluster != ClusterName(tc.srv.address) || s.Version != tc.version || !s.Healthy {
			t.Errorf("server %s = {cluster %s, version %s, healthy %v}, want {%s, %s, true}",
				s.ID, s.Cluster, s.Version, s.Healthy, ClusterName(tc.srv.address), tc.version)
		}
		if len(s.APIs.Items) == 0 || len(s.Core.Items) != 1 {
			t.Errorf("server %s: %d groups at /apis and %d at /api", s.ID, len(s.APIs.Items), len(s.Core.Items))
		}
		for _, path := range []string{pathAPIs, pathCore} {
			if !bytes.Contains(raw, bytes.TrimSpace(tc.srv.document(path).body)) {
				t.Errorf("server %s: %s is not embedded byte for byte", s.ID, path)
			}
			h := tc.srv.header(path)
			const wantAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer," +
				"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
			if got := h.Get("Accept"); got != wantAccept {
				t.Errorf("%s Accept = %q, want %q", path, got, wantAccept)
			}
			if h.Get("X-Remote-User") != RemoteUser || h.Get("X-Remote-Group") != RemoteGroup {
				t.Errorf("%s identity headers = %q/%q", path, h.Get("X-Remote-User"), h.Get("X-Remote-Group"))
			}
		}
	}
	wantAddresses := map[string]string{ClusterName(a.address): a.address, ClusterName(b.address): b.address}
	if got := c.ClusterAddresses(); !maps.Equal(got, wantAddresses) {
		t.Errorf("ClusterAddresses = %v, want %v", got, wantAddresses)
	}
	if got := metricValue(t, c, "skewgate_controller_snapshot_generation"); got != 1 {
		t.Errorf("generation metric = %v, want 1", got)
	}
	if got := metricValue(t, c, "skewgate_controller_servers_healthy"); got != 2 {
		t.Errorf("healthy servers metric = %v, want 2", got)
	}
	if metricValue(t, c, "skewgate_controller_last_successful_poll_timestamp_seconds") == 0 {
		t.Error("last successful poll time not set")
	}
}

func TestUnchangedServersPublishNoNewSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		etags bool
	}{
		{"revalidated with If-None-Match", true},
		{"served in full without ETag", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := newTestPKI(t)
			plane := discoverytest.SkewedControlPlane()
			a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
			if !tc.etags {
				for _, path := range []string{pathAPIs, pathCore} {
					doc := a.document(path)
					doc.etag = ""
					a.setDocument(path, doc)
				}
			}
			rec := &recorder{}
			c := startController(t, testOptions(pki, rec, a))
			waitUntil(t, "Ready", c.Ready)

			// A round's /readyz comes after the previous round has published,
			// so six more of them mean five complete rounds.
			start := a.requestCount(pathReadyz)
			waitUntil(t, "five more polls", func() bool { return a.requestCount(pathReadyz) >= start+6 })
			if n := rec.count(); n != 1 {
				t.Errorf("%d snapshots offered, want 1", n)
			}
			if _, snap := c.Current(); snap.Generation != 1 {
				t.Errorf("generation = %d, want 1", snap.Generation)
			}
			for _, path := range []string{pathAPIs, pathCore} {
				wantIfNoneMatch := ""
				if tc.etags {
					wantIfNoneMatch = a.document(path).etag
					if n := a.notModifiedCount(path); n < 5 {
						t.Errorf("%s answered 304 %d times, want at least 5", path, n)
					}
				}
				if got := a.header(path).Get("If-None-Match"); got != wantIfNoneMatch {
					t.Errorf("%s If-None-Match = %q, want %q", path, got, wantIfNoneMatch)
				}
			}
		})
	}
}

func TestEveryChangePublishesTheNextGeneration(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	plane := discoverytest.SkewedControlPlane()
	rec := &recorder{}
	c := startController(t, testOptions(pki, rec, a, b))
	waitUntil(t, "Ready", c.Ready)
	idA, idB := ClusterName(a.address), ClusterName(b.address)

	upgraded := plane[2].Groups
	withSecrets := maps.Clone(plane[1].Groups)
	withSecrets["/v1"] = append(slices.Clone(withSecrets["/v1"]), "secrets")
	steps := []struct {
		name   string
		change func()
		check  func(snap *discovery.Snapshot) bool
	}{
		{"a's /apis changes", func() { a.setDocument(pathAPIs, aggregatedDocument(upgraded, false)) },
			func(snap *discovery.Snapshot) bool {
				return servesVersion(serverByID(snap, idA), "coordination.k8s.io", "v1alpha2")
			}},
		{"b's version changes", func() { b.setVersion("v1.36.4") },
			func(snap *discovery.Snapshot) bool { return serverByID(snap, idB).Version == "v1.36.4" }},
		{"b's /api changes", func() { b.setDocument(pathCore, aggregatedDocument(withSecrets, true)) },
			func(snap *discovery.Snapshot) bool {
				return len(serverByID(snap, idB).Core.Items[0].Versions[0].Resources) == 4
			}},
	}
	for i, step := range steps {
		want := uint64(i + 2)
		step.change()
		o := rec.waitOffer(t, step.name, func(snap *discovery.Snapshot) bool { return snap.Generation == want })
		if !step.check(o.snap) {
			t.Errorf("%s: generation %d does not show the change", step.name, want)
		}
		for _, srv := range []*fakeAPIServer{a, b} {
			for _, path := range []string{pathAPIs, pathCore} {
				if !bytes.Contains(o.raw, bytes.TrimSpace(srv.document(path).body)) {
					t.Errorf("%s: generation %d lacks %s%s as served", step.name, want, srv.address, path)
				}
			}
		}
		if n := rec.count(); n != i+2 {
			t.Errorf("%s: %d snapshots offered, want %d", step.name, n, i+2)
		}
	}
}

func servesVersion(s *discovery.Server, group, version string) bool {
	for _, g := range s.APIs.Items {
		if g.Name() == group && slices.ContainsFunc(g.Versions, func(v discovery.Version) bool { return v.Version == version }) {
			return true
		}
	}
	return false
}

func TestFailingReadyzMarksServerUnhealthyInTheNextSnapshot(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	failedBeforeOffer := map[uint64]int{}
	rec := &recorder{onOffer: func(snap *discovery.Snapshot) { failedBeforeOffer[snap.Generation] = b.failedReadyzCount() }}
	c := startController(t, testOptions(pki, rec, a, b))
	waitUntil(t, "Ready", c.Ready)
	idA, idB := ClusterName(a.address), ClusterName(b.address)

	b.setReady(false)
	o := rec.waitOffer(t, "b unhealthy", func(snap *discovery.Snapshot) bool { return !serverByID(snap, idB).Healthy })
	rec.mu.Lock()
	failed := failedBeforeOffer[o.snap.Generation]
	rec.mu.Unlock()
	if failed != 1 {
		t.Errorf("b was marked unhealthy after %d failed /readyz answers, want the first one", failed)
	}
	if !serverByID(o.snap, idA).Healthy {
		t.Error("a lost its health with b")
	}
	if !bytes.Contains(o.raw, bytes.TrimSpace(b.document(pathAPIs).body)) {
		t.Error("b's documents left the snapshot with its health")
	}

	// A server that is not ready may serve partial discovery: it is not asked.
	apisRequests := b.requestCount(pathAPIs)
	waitUntil(t, "three more failed probes", func() bool { return b.failedReadyzCount() >= 4 })
	if n := b.requestCount(pathAPIs); n != apisRequests {
		t.Errorf("/apis was requested %d times from a server that is not ready", n-apisRequests)
	}

	b.setReady(true)
	rec.waitOffer(t, "b healthy again", func(snap *discovery.Snapshot) bool {
		return snap.Generation > o.snap.Generation && serverByID(snap, idB).Healthy
	})
}

func TestUnreachableServerStaysUnhealthyForTheGracePeriodThenLeaves(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	rec := &recorder{}
	opts := testOptions(pki, rec, a, b)
	opts.GracePeriod = 400 * time.Millisecond
	c := startController(t, opts)
	waitUntil(t, "Ready", c.Ready)
	idB := ClusterName(b.address)

	b.srv.Close()
	lastReady := b.lastReadyAnswer()
	unhealthy := rec.waitOffer(t, "b unhealthy", func(snap *discovery.Snapshot) bool {
		s := serverByID(snap, idB)
		return s != nil && !s.Healthy
	})
	removed := rec.waitOffer(t, "b removed", func(snap *discovery.Snapshot) bool { return serverByID(snap, idB) == nil })
	if removed.snap.Generation != unhealthy.snap.Generation+1 {
		t.Errorf("removed in generation %d, want right after the unhealthy generation %d", removed.snap.Generation, unhealthy.snap.Generation)
	}
	if gap := removed.at.Sub(lastReady); gap <= opts.GracePeriod {
		t.Errorf("removed %v after its last ready answer, within the %v grace period", gap, opts.GracePeriod)
	}
	if got := snapshotIDs(removed.snap); !slices.Equal(got, []string{ClusterName(a.address)}) {
		t.Errorf("servers after removal = %v", got)
	}
	if metricValue(t, c, fetchErrorSeries(b.address, pathReadyz, reasonRefused)) == 0 {
		t.Error("refused /readyz not counted")
	}
	if got := metricValue(t, c, "skewgate_controller_snapshot_servers"); got != 1 {
		t.Errorf("snapshot servers metric = %v, want 1", got)
	}
}

func TestBadAnswersKeepTheLastGoodDocumentAndAreCounted(t *testing.T) {
	plane := discoverytest.SkewedControlPlane()
	good := aggregatedDocument(plane[0].Groups, false).body
	const limit = 64 << 10
	padded := append(bytes.Repeat([]byte(" "), limit), good...)
	for _, tc := range []struct {
		name   string
		doc    fakeDocument
		reason string
	}{
		{"truncated JSON", fakeDocument{status: http.StatusOK, contentType: aggregatedContentType, body: good[:len(good)/2]}, reasonMalformed},
		{"not a group list", fakeDocument{status: http.StatusOK, contentType: aggregatedContentType, body: []byte(`{"items":"none"}`)}, reasonMalformed},
		{"core group at /apis", fakeDocument{status: http.StatusOK, contentType: aggregatedContentType, body: discoverytest.GroupListJSON(plane[0].Groups, true)}, reasonMalformed},
		{"oversized, chunked", fakeDocument{status: http.StatusOK, contentType: aggregatedContentType, body: padded}, reasonTooLarge},
		{"oversized, declared length", fakeDocument{status: http.StatusOK, contentType: aggregatedContentType, body: padded, declareLength: true}, reasonTooLarge},
		{"unaggregated content type", fakeDocument{status: http.StatusOK, contentType: "application/json", body: good}, reasonContentType},
		{"server error", fakeDocument{status: http.StatusServiceUnavailable, contentType: aggregatedContentType, body: good}, reasonStatus},
		{"redirect", fakeDocument{status: http.StatusFound, contentType: aggregatedContentType, body: good}, reasonStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := newTestPKI(t)
			a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
			rec := &recorder{}
			opts := testOptions(pki, rec, a)
			opts.MaxResponseBytes = limit
			c := startController(t, opts)
			waitUntil(t, "Ready", c.Ready)

			// Some bad answers reuse the good body: a distinct ETag keeps the
			// server from answering 304 to the controller's If-None-Match.
			tc.doc.etag = `"bad-answer"`
			a.setDocument(pathAPIs, tc.doc)
			series := fetchErrorSeries(a.address, pathAPIs, tc.reason)
			waitUntil(t, series+" >= 3", func() bool { return metricValue(t, c, series) >= 3 })
			raw, snap := c.Current()
			if snap.Generation != 1 || rec.count() != 1 {
				t.Errorf("generation %d after %d offers, want the first snapshot only", snap.Generation, rec.count())
			}
			if !bytes.Contains(raw, bytes.TrimSpace(good)) {
				t.Error("the last good /apis document is gone")
			}
		})
	}
}

func TestServerNeverFetchedIsNotInTheSnapshot(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	healthy := b.document(pathAPIs)
	b.setDocument(pathAPIs, fakeDocument{status: http.StatusOK, contentType: aggregatedContentType, body: []byte(`{"items":[`)})
	rec := &recorder{}
	c := startController(t, testOptions(pki, rec, a, b))

	waitUntil(t, "Ready", c.Ready)
	_, snap := c.Current()
	if got := snapshotIDs(snap); !slices.Equal(got, []string{ClusterName(a.address)}) {
		t.Fatalf("servers = %v, want only a", got)
	}
	if metricValue(t, c, fetchErrorSeries(b.address, pathAPIs, reasonMalformed)) == 0 {
		t.Error("b's malformed /apis not counted")
	}
	b.setDocument(pathAPIs, healthy)
	o := rec.waitOffer(t, "b joins", func(snap *discovery.Snapshot) bool { return serverByID(snap, ClusterName(b.address)) != nil })
	if o.snap.Generation != 2 {
		t.Errorf("b joined in generation %d, want 2", o.snap.Generation)
	}
}

func TestServerCertificateMustChainToThePeerCAAndNameServerName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		issuer func(t *testing.T, pki *testPKI) *devpki.CA
		dns    string
	}{
		{"signed by another CA", func(t *testing.T, _ *testPKI) *devpki.CA { return newTestCA(t, "rogue-ca") }, DefaultServerName},
		{"issued for another name", func(_ *testing.T, pki *testPKI) *devpki.CA { return pki.serving }, "kube-a.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := newTestPKI(t)
			plane := discoverytest.SkewedControlPlane()
			a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
			cert := servingCert(t, tc.issuer(t, pki), tc.dns)
			rogue := newFakeAPIServer(t, pki, plane[1].Version, plane[1].Groups, withServingCert(cert))
			rec := &recorder{}
			c := startController(t, testOptions(pki, rec, a, rogue))

			waitUntil(t, "Ready", c.Ready)
			series := fetchErrorSeries(rogue.address, pathReadyz, reasonTLS)
			waitUntil(t, series+" >= 3", func() bool { return metricValue(t, c, series) >= 3 })
			if _, snap := c.Current(); !slices.Equal(snapshotIDs(snap), []string{ClusterName(a.address)}) {
				t.Errorf("servers = %v, want only the verified one", snapshotIDs(snap))
			}
			if n := rogue.totalRequests(); n != 0 {
				t.Errorf("the unverified server received %d requests", n)
			}
		})
	}
}
