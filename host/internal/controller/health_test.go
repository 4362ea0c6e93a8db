package controller

import (
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

func TestServerTurnsUnhealthyAtTheFirstNotReadyAnswerOrRefusedConnectionButOnlyAfterConsecutiveUnansweredProbes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fail   func(*fakeAPIServer)
		reason string
		want   int
	}{
		{"answers not ready", func(s *fakeAPIServer) { s.setReady(false) }, reasonNotReady, 1},
		{"does not answer in time", func(s *fakeAPIServer) { s.stall(1000) }, reasonTimeout, DefaultFailureThreshold},
		{"refuses connections", func(s *fakeAPIServer) { s.srv.Close() }, reasonRefused, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki, a, b := newSkewedPair(t)
			idB := ClusterName(b.address)
			var c *Controller
			// The controller's metrics as they were when b was first offered
			// unhealthy; guarded by the recorder's lock.
			var atUnhealthy string
			rec := &recorder{onOffer: func(snap *discovery.Snapshot) {
				if s := serverByID(snap, idB); s != nil && !s.Healthy && atUnhealthy == "" {
					atUnhealthy, _ = writeExposition(c)
				}
			}}
			opts := testOptions(pki, rec, a, b)
			opts.RequestTimeout = 100 * time.Millisecond
			var err error
			if c, err = New(opts); err != nil {
				t.Fatal(err)
			}
			run(t, c)
			waitUntil(t, "Ready", c.Ready)

			tc.fail(b)
			rec.waitOffer(t, "b unhealthy", func(snap *discovery.Snapshot) bool {
				s := serverByID(snap, idB)
				return s != nil && !s.Healthy
			})
			rec.mu.Lock()
			failed := sampleValue(t, atUnhealthy, fetchErrorSeries(b.address, pathReadyz, tc.reason))
			rec.mu.Unlock()
			if int(failed) != tc.want {
				t.Errorf("b was marked unhealthy after %v failed probes (%s), want %d", failed, tc.reason, tc.want)
			}
		})
	}
}

func TestAnsweredProbeResetsTheConsecutiveFailures(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	rec := &recorder{}
	opts := testOptions(pki, rec, a, b)
	// Long enough that an answered probe never times out on a loaded
	// machine: only the stalled ones may count as failures.
	opts.RequestTimeout = 500 * time.Millisecond
	c := startController(t, opts)
	waitUntil(t, "Ready", c.Ready)

	for i := 1; i <= 3; i++ {
		b.stall(DefaultFailureThreshold - 1)
		answered := b.requestCount(pathReadyz)
		waitUntil(t, "the unanswered probes and an answered one", func() bool {
			return b.stalledCount() == i*(DefaultFailureThreshold-1) && b.requestCount(pathReadyz) > answered
		})
	}
	for _, o := range rec.all() {
		if !serverByID(o.snap, ClusterName(b.address)).Healthy {
			t.Fatalf("generation %d marks b unhealthy; it never missed %d probes in a row", o.snap.Generation, DefaultFailureThreshold)
		}
	}
}

func TestReadinessIsProbedBetweenDiscoveryPolls(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	plane := discoverytest.SkewedControlPlane()
	rec := &recorder{}
	opts := testOptions(pki, rec, a, b)
	opts.PollInterval = time.Hour
	opts.ReadinessInterval = 20 * time.Millisecond
	c := startController(t, opts)
	waitUntil(t, "Ready", c.Ready)
	idB := ClusterName(b.address)

	// Readiness rounds ask nothing else of a healthy server.
	apis, readyz := b.requestCount(pathAPIs), b.requestCount(pathReadyz)
	waitUntil(t, "five readiness probes", func() bool { return b.requestCount(pathReadyz) >= readyz+5 })
	if n := b.requestCount(pathAPIs) - apis; n != 0 {
		t.Errorf("/apis requested %d times between polls", n)
	}

	b.setReady(false)
	down := rec.waitOffer(t, "b unhealthy within the poll interval", func(snap *discovery.Snapshot) bool {
		return !serverByID(snap, idB).Healthy
	})

	// b comes back as another version: it is healthy again only with what
	// it serves now.
	b.setVersion(plane[2].Version)
	b.setDocument(pathAPIs, aggregatedDocument(plane[2].Groups, false))
	b.setReady(true)
	up := rec.waitOffer(t, "b healthy again", func(snap *discovery.Snapshot) bool {
		return snap.Generation > down.snap.Generation && serverByID(snap, idB).Healthy
	})
	if s := serverByID(up.snap, idB); s.Version != plane[2].Version || !servesVersion(s, "coordination.k8s.io", "v1alpha2") {
		t.Errorf("b healthy again as %s without its new documents", s.Version)
	}
}

func TestServerLostUnderARequestIsUnhealthyAtOnce(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	rec := &recorder{}
	opts := testOptions(pki, rec, a, b)
	// No probe comes between the report and the snapshot it publishes.
	opts.PollInterval, opts.ReadinessInterval = time.Hour, time.Hour
	c := startController(t, opts)
	waitUntil(t, "Ready", c.Ready)
	idB := ClusterName(b.address)
	rec.waitOffer(t, "b healthy", func(snap *discovery.Snapshot) bool {
		s := serverByID(snap, idB)
		return s != nil && s.Healthy
	})

	c.ServerLost("no-such-cluster")
	c.ServerLost(idB)
	o := rec.waitOffer(t, "b unhealthy", func(snap *discovery.Snapshot) bool {
		s := serverByID(snap, idB)
		return s != nil && !s.Healthy
	})
	if s := serverByID(o.snap, ClusterName(a.address)); s == nil || !s.Healthy {
		t.Error("a report of b's cluster took a out too")
	}
	if probes := b.requestCount(pathReadyz); probes != 1 {
		t.Errorf("b's /readyz was probed %d times, want once (the first poll): the report alone must publish", probes)
	}
}
