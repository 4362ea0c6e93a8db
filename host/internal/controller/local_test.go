package controller

import (
	"net/http"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
)

func TestLocalServerIsTheSnapshotsPreferredServerOnceItHasDocuments(t *testing.T) {
	pki, local, peer := newSkewedPair(t)
	healthy := local.document(pathAPIs)
	local.setDocument(pathAPIs, fakeDocument{status: http.StatusInternalServerError, body: []byte("not yet")})
	rec := &recorder{}
	opts := testOptions(pki, rec, peer)
	// Listed as static too: one server, named once.
	opts.StaticServers = append(opts.StaticServers, local.url())
	opts.LocalServer = local.url()
	c := startController(t, opts)

	waitUntil(t, "Ready", c.Ready)
	_, snap := c.Current()
	if snap.Preferred != "" || len(snap.Servers) != 1 {
		t.Fatalf("before the local server has documents: preferred %q, %d servers; want none and 1", snap.Preferred, len(snap.Servers))
	}
	local.setDocument(pathAPIs, healthy)
	o := rec.waitOffer(t, "the local server joins", func(s *discovery.Snapshot) bool { return len(s.Servers) == 2 })
	want := ClusterName(local.address)
	if o.snap.Preferred != want {
		t.Errorf("preferred %q; want the local server %q", o.snap.Preferred, want)
	}
	if read, err := discovery.ParseSnapshot(o.raw); err != nil || read.Preferred != want {
		t.Errorf("the snapshot document does not name the preferred server: %v, %.200s", err, o.raw)
	}
}

func TestLocalServerMustBeAnHTTPSHostAndPort(t *testing.T) {
	pki := newTestPKI(t)
	opts := testOptions(pki, &recorder{})
	opts.LocalServer = "http://127.0.0.1:6443"
	_, err := New(opts)
	if err == nil || !strings.Contains(err.Error(), `controller: local API server "http://127.0.0.1:6443": must be an https:// URL`) {
		t.Errorf("error %v", err)
	}
}
