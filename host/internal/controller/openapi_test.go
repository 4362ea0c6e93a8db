package controller

import (
	"net/http"
	"slices"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

func TestSnapshotCarriesEveryServersOpenAPIIndex(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	c := startController(t, testOptions(pki, &recorder{}, a, b))
	waitUntil(t, "Ready", c.Ready)
	_, snap := c.Current()
	for _, srv := range []*fakeAPIServer{a, b} {
		want, err := discovery.ParseOpenAPIIndex(srv.document(pathOpenAPI).body)
		if err != nil {
			t.Fatal(err)
		}
		if got := serverByID(snap, ClusterName(srv.address)).OpenAPI; !slices.Equal(got, want) {
			t.Errorf("%s: snapshot holds OpenAPI paths %v, want the %v it served", srv.address, got, want)
		}
	}
	waitUntil(t, "the index revalidated with If-None-Match", func() bool { return a.notModifiedCount(pathOpenAPI) > 0 })
}

// The index does not decide health: a server without one (an error, or an
// answer the snapshot cannot carry) keeps serving its APIs, and a bad answer
// keeps the last good index.
func TestBadOpenAPIIndexKeepsTheLastGoodOneAndTheServerHealthy(t *testing.T) {
	plane := discoverytest.SkewedControlPlane()
	for _, tc := range []struct {
		name   string
		doc    fakeDocument
		reason string
	}{
		{"hash that is no hash", fakeDocument{status: http.StatusOK, contentType: "application/json",
			body: discoverytest.OpenAPIIndexJSON(map[string]string{"api/v1": "A&B"})}, reasonMalformed},
		{"not found", fakeDocument{status: http.StatusNotFound, contentType: "text/plain", body: []byte("404 page not found")}, reasonStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := newTestPKI(t)
			a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
			good, err := discovery.ParseOpenAPIIndex(a.document(pathOpenAPI).body)
			if err != nil {
				t.Fatal(err)
			}
			c := startController(t, testOptions(pki, &recorder{}, a))
			waitUntil(t, "Ready", c.Ready)
			tc.doc.etag = `"bad-answer"`
			a.setDocument(pathOpenAPI, tc.doc)
			series := fetchErrorSeries(a.address, pathOpenAPI, tc.reason)
			waitUntil(t, series+" >= 3", func() bool { return metricValue(t, c, series) >= 3 })
			_, snap := c.Current()
			if kept := slices.Equal(snap.Servers[0].OpenAPI, good); !kept || !snap.Servers[0].Healthy {
				t.Errorf("after bad /openapi/v3 answers: last good index kept %v, healthy %v; want both", kept, snap.Servers[0].Healthy)
			}
		})
	}

	pki := newTestPKI(t)
	a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
	a.setDocument(pathOpenAPI, fakeDocument{status: http.StatusForbidden, contentType: "application/json", body: []byte(`{}`)})
	c := startController(t, testOptions(pki, &recorder{}, a))
	waitUntil(t, "Ready", c.Ready)
	if _, snap := c.Current(); !snap.Servers[0].Healthy || snap.Servers[0].OpenAPI != nil {
		t.Errorf("server never serving its index: healthy %v, %d OpenAPI paths; want healthy, none", snap.Servers[0].Healthy, len(snap.Servers[0].OpenAPI))
	}
}
