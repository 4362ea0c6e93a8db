package controller

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/skewgate/skewgate/discovery"
)

const (
	leaseSchemaPath = "apis/coordination.k8s.io/v1"
	coreSchemaPath  = "api/v1"
)

// leaseSchema is an OpenAPI v3 document of coordination.k8s.io/v1 as
// kube-apiserver writes it, its Lease spec with the given properties.
func leaseSchema(t *testing.T, specFields ...string) []byte {
	t.Helper()
	props := map[string]any{}
	for _, f := range specFields {
		props[f] = map[string]any{"type": "string", "description": "The " + f + "."}
	}
	raw, err := json.Marshal(map[string]any{
		"openapi": "3.0.0",
		"components": map[string]any{"schemas": map[string]any{
			"io.k8s.api.coordination.v1.Lease": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"metadata": map[string]any{"default": map[string]any{}, "allOf": []any{map[string]any{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}},
					"spec":     map[string]any{"default": map[string]any{}, "allOf": []any{map[string]any{"$ref": "#/components/schemas/io.k8s.api.coordination.v1.LeaseSpec"}}},
				},
				"x-kubernetes-group-version-kind": []any{map[string]any{"group": "coordination.k8s.io", "kind": "Lease", "version": "v1"}},
			},
			"io.k8s.api.coordination.v1.LeaseSpec":            map[string]any{"type": "object", "properties": props},
			"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// fieldSkewedServer is a fake server of version serving services and leases,
// with its own /apis and /api.
func fieldSkewedServer(t *testing.T, pki *testPKI, version string) *fakeAPIServer {
	t.Helper()
	f := newFakeAPIServer(t, pki, version, nil)
	for path, core := range map[string]bool{pathAPIs: false, pathCore: true} {
		body := groupListJSON(t, core, servicesResource, leasesResource)
		f.setDocument(path, fakeDocument{status: http.StatusOK, contentType: aggregatedContentType, body: body, etag: etagOf(body)})
	}
	return f
}

func schemaRequests(servers ...*fakeAPIServer) (lease, core int) {
	for _, s := range servers {
		lease += s.requestCount(pathOpenAPI + "/" + leaseSchemaPath)
		core += s.requestCount(pathOpenAPI + "/" + coreSchemaPath)
	}
	return lease, core
}

// A rolling upgrade from 1.30 to 1.31 half done: the controller fetches each
// differing document once, learns what the 1.30 server lacks and which labels
// each accepts, and forgets it all once the last server is upgraded.
func TestSchemasAreFetchedOncePerHashWhereTheServersDiffer(t *testing.T) {
	pki := newTestPKI(t)
	old := fieldSkewedServer(t, pki, "v1.30.14")
	upgraded := []*fakeAPIServer{fieldSkewedServer(t, pki, "v1.31.4"), fieldSkewedServer(t, pki, "v1.31.4")}
	all := append([]*fakeAPIServer{old}, upgraded...)
	coreDoc := []byte(`{"openapi":"3.0.0","components":{"schemas":{}}}`)
	old.setSchema(leaseSchemaPath, leaseSchema(t, "holderIdentity"))
	for _, s := range all {
		s.setSchema(coreSchemaPath, coreDoc)
	}
	for _, s := range upgraded {
		s.setSchema(leaseSchemaPath, leaseSchema(t, "holderIdentity", "strategy", "preferredHolder"))
	}
	rec := &recorder{}
	c := startController(t, testOptions(pki, rec, all...))
	oldID := ClusterName(old.address)

	rec.waitOffer(t, "the 1.30 server's missing lease fields", func(snap *discovery.Snapshot) bool {
		s := serverByID(snap, oldID)
		return s != nil && slices.Equal(s.MissingFields["coordination.k8s.io/v1/leases"], []string{"spec.preferredHolder", "spec.strategy"})
	})
	_, snap := c.Current()
	for _, s := range snap.Servers {
		want := []string{"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}
		if s.ID == oldID {
			want = want[:2]
		} else if len(s.MissingFields) != 0 {
			t.Errorf("%s: missingFields %v, want none", s.ID, s.MissingFields)
		}
		if got := s.FieldSelectors["v1/services"]; !slices.Equal(got, want) {
			t.Errorf("%s (%s): services labels %q, want %q", s.ID, s.Version, got, want)
		}
	}
	// One fetch per distinct hash; none of the core document, which every
	// server publishes with one hash.
	if lease, core := schemaRequests(all...); lease != 2 || core != 0 {
		t.Errorf("lease documents fetched %d times, core %d; want 2 and 0", lease, core)
	}
	polls := old.requestCount(pathAPIs)
	waitUntil(t, "three more polls", func() bool { return old.requestCount(pathAPIs) >= polls+3 })
	if lease, _ := schemaRequests(all...); lease != 2 {
		t.Errorf("lease documents fetched %d times after more polls, want still 2", lease)
	}
	series := "skewgate_controller_openapi_documents"
	if got := metricValue(t, c, series); got != 2 {
		t.Errorf("%s = %v, want 2", series, got)
	}

	old.setVersion("v1.31.4")
	old.setSchema(leaseSchemaPath, leaseSchema(t, "holderIdentity", "strategy", "preferredHolder"))
	rec.waitOffer(t, "no field-level differences once every server is upgraded", func(snap *discovery.Snapshot) bool {
		for _, s := range snap.Servers {
			if s.Version != "v1.31.4" || s.MissingFields != nil || s.FieldSelectors != nil {
				return false
			}
		}
		return true
	})
	waitUntil(t, "the documents forgotten", func() bool { return metricValue(t, c, series) == 0 })
}

func TestAnUnreadableSchemaIsRetriedLaterAndChangesNothing(t *testing.T) {
	pki := newTestPKI(t)
	a, b := fieldSkewedServer(t, pki, "v1.31.4"), fieldSkewedServer(t, pki, "v1.31.4")
	a.setSchema(leaseSchemaPath, leaseSchema(t, "holderIdentity"))
	b.setSchema(leaseSchemaPath, []byte(`{"openapi":"3.0.0","paths":{}}`))
	rec := &recorder{}
	c := startController(t, testOptions(pki, rec, a, b))
	series := `skewgate_controller_openapi_document_errors_total{reason="malformed"}`
	waitUntil(t, series+" = 1", func() bool { return metricValue(t, c, series) == 1 })
	polls := b.requestCount(pathAPIs)
	waitUntil(t, "three more polls", func() bool { return b.requestCount(pathAPIs) >= polls+3 })
	if got := b.requestCount(pathOpenAPI + "/" + leaseSchemaPath); got != 1 {
		t.Errorf("the unreadable document was fetched %d times within the retry interval, want once", got)
	}
	_, snap := c.Current()
	for _, s := range snap.Servers {
		if s.MissingFields != nil || !s.Healthy {
			t.Errorf("%s: healthy %v, missingFields %v; want healthy and none known", s.ID, s.Healthy, s.MissingFields)
		}
	}
}
