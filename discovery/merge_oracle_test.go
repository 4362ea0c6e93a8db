package discovery

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	"k8s.io/klog/v2"
)

// The oracle is upstream's merge itself: aggregated.TestMergeResources for the
// merge alone, aggregated.TestFetchFromCache for merge and ETag together, and
// the peer-aggregated HTTP handler for the served body. Inputs are built as
// upstream's typed values and marshalled, so both sides decode the same bytes:
// upstream with encoding/json, skewgate with ParseGroupList.

var updateMergeTestdata = flag.Bool("update-merge-testdata", false, "rewrite testdata/merge from the sample definitions and upstream's merge")

const (
	mergeTestdataDir = "testdata/merge"
	fixturesDir      = "../fixtures"
	// Upstream server IDs are identity lease names like these; the v1.35 server
	// sorts first, so its document is upstream's "local" one for skewgate.
	sampleIDv135  = "apiserver-5t3nq2c6jp3xcmq7uhsfzmj2ua"
	sampleIDv136  = "apiserver-qxw4d5bduhdm2vbmwfprcpvp7e"
	sampleIDv136b = "apiserver-xe3a7skxp7zzzf7mjnhirkfjwa"
)

// discoveryAccept is the Accept header of a client asking for aggregated JSON.
const discoveryAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

func init() {
	// The resource manager logs every group version it is given; thousands of
	// generated documents would bury the test output.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
}

// staticPeerResources is a PeerDiscoveryProvider with fixed peer documents.
type staticPeerResources map[string][]apidiscoveryv2.APIGroupDiscovery

func (p staticPeerResources) GetPeerResources() map[string][]apidiscoveryv2.APIGroupDiscovery {
	return p
}

// rawServer is one server's discovery document as it would arrive on the wire.
type rawServer struct {
	id  string
	doc []byte
}

// decodedServers decodes every document both ways, failing the test if
// ParseGroupList rejects one or re-encodes it differently from encoding/json.
func decodedServers(t *testing.T, servers []rawServer) (ours []ServerGroups, upstream map[string][]apidiscoveryv2.APIGroupDiscovery) {
	t.Helper()
	upstream = make(map[string][]apidiscoveryv2.APIGroupDiscovery, len(servers))
	for _, s := range servers {
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(s.doc, &list); err != nil {
			t.Fatalf("server %s: encoding/json rejects its document: %v", s.id, err)
		}
		parsed, err := ParseGroupList(s.doc)
		if err != nil {
			t.Fatalf("server %s: ParseGroupList: %v\n%s", s.id, err, s.doc)
		}
		want := marshalUpstreamItems(t, list.Items)
		if got := parsed.AppendJSON(nil, false); !bytes.Equal(got, want) {
			t.Fatalf("server %s: parse + AppendJSON differs from encoding/json decode + encode\ninput: %s\n got: %s\nwant: %s", s.id, s.doc, got, want)
		}
		upstream[s.id] = list.Items
		ours = append(ours, ServerGroups{ServerID: s.id, Groups: parsed.Items})
	}
	return ours, upstream
}

// marshalUpstreamItems is what upstream hashes: the items in a list whose
// TypeMeta and ListMeta are empty.
func marshalUpstreamItems(t testing.TB, items []apidiscoveryv2.APIGroupDiscovery) []byte {
	t.Helper()
	out, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// requireSameMerge fails unless skewgate's merged items and ETag equal
// upstream's: byte for byte as encoded, semantically after a JSON round trip,
// and the quoted hex ETag.
func requireSameMerge(t *testing.T, what string, got []Group, want []apidiscoveryv2.APIGroupDiscovery, wantETag string) {
	t.Helper()
	ours := GroupList{Items: got}
	gotJSON := ours.AppendJSON(nil, false)
	wantJSON := marshalUpstreamItems(t, want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("%s: merged document differs from upstream's\n got: %s\nwant: %s", what, gotJSON, wantJSON)
	}
	var roundTrip apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(gotJSON, &roundTrip); err != nil {
		t.Fatalf("%s: merged document does not decode: %v", what, err)
	}
	if !apiequality.Semantic.DeepEqual(roundTrip.Items, want) {
		t.Fatalf("%s: merged content differs from upstream's after a JSON round trip", what)
	}
	if tag := ETag(ours); tag != `"`+wantETag+`"` {
		t.Fatalf("%s: ETag %s, upstream %q", what, tag, wantETag)
	}
}

func upstreamETag(t testing.TB, items []apidiscoveryv2.APIGroupDiscovery) string {
	return fmt.Sprintf("%X", sha512.Sum512(marshalUpstreamItems(t, items)))
}

// compareWithUpstreamMerge runs both merges with localID as upstream's own
// server and requires identical results. servers reach MergeGroups in the
// order given.
func compareWithUpstreamMerge(t *testing.T, servers []rawServer, localID string) {
	t.Helper()
	ours, upstream := decodedServers(t, servers)
	peers := make(map[string][]apidiscoveryv2.APIGroupDiscovery, len(upstream))
	for id, items := range upstream {
		if id != localID {
			peers[id] = items
		}
	}
	want := aggregated.TestMergeResources(localID, upstream[localID], peers)
	requireSameMerge(t, "TestMergeResources", MergeGroups(ours, localID), want, upstreamETag(t, want))
}

// compareWithUpstreamFetch runs upstream's whole fetchFromCache: the local
// document comes from a resource manager, which orders and de-duplicates what
// it is given, so skewgate merges the local document the manager serves. The
// manager gets the local groups as encoding/json's output decodes: an in-memory
// [] that JSON omits would make upstream see a difference no served document
// shows.
func compareWithUpstreamFetch(t *testing.T, servers []rawServer, localID string) {
	t.Helper()
	_, upstream := decodedServers(t, servers)
	var served apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(marshalUpstreamItems(t, upstream[localID]), &served); err != nil {
		t.Fatal(err)
	}
	rm := aggregated.NewResourceManager("apis")
	for _, g := range served.Items {
		for _, v := range g.Versions {
			rm.AddGroupVersion(g.Name, v)
		}
	}
	local, _ := aggregated.TestFetchFromCache(localID, rm, nil)
	localDoc, err := json.Marshal(local)
	if err != nil {
		t.Fatal(err)
	}
	withLocal := []rawServer{{id: localID, doc: localDoc}}
	peers := make(staticPeerResources)
	for _, s := range servers {
		if s.id != localID {
			withLocal = append(withLocal, s)
			peers[s.id] = upstream[s.id]
		}
	}
	ours, _ := decodedServers(t, withLocal)
	want, wantETag := aggregated.TestFetchFromCache(localID, rm, peers)
	requireSameMerge(t, "TestFetchFromCache", MergeGroups(ours, localID), want.Items, wantETag)
}

func TestMergeGroupsMatchesUpstreamOnRandomServerSets(t *testing.T) {
	const cases = 1200
	for seed := range uint64(cases) {
		gen := newDiscoveryGen(seed)
		servers := gen.serverSet()
		localID := gen.localID(servers)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			compareWithUpstreamMerge(t, servers, localID)
			compareWithUpstreamFetch(t, servers, localID)
		})
	}
}

// TestMergeGroupsMatchesUpstreamOnFixtures compares every APIGroupDiscoveryList
// captured under fixtures/, top-level or nested (a snapshot holds one per server
// and path): each must round-trip, and the lists found at the same place are
// merged as one server set.
func TestMergeGroupsMatchesUpstreamOnFixtures(t *testing.T) {
	sets := map[string][]rawServer{}
	found := 0
	err := filepath.WalkDir(fixturesDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !json.Valid(raw) {
			return nil
		}
		for _, list := range findDiscoveryLists(raw) {
			set := filepath.Dir(path)
			if list.place != "" {
				set = path + ":" + list.place
			}
			sets[set] = append(sets[set], rawServer{id: path + ":" + list.at, doc: list.raw})
			found++
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	t.Logf("%d APIGroupDiscoveryList documents in %d sets under %s", found, len(sets), fixturesDir)
	for name, servers := range sets {
		t.Run(name, func(t *testing.T) {
			ids := make([]string, len(servers))
			for i, s := range servers {
				ids[i] = s.id
			}
			compareWithUpstreamMerge(t, servers, slices.Min(ids))
		})
	}
}

type foundList struct {
	// at locates the list in its file; place is the same with array indexes
	// removed, shared by the lists of one server set.
	at, place string
	raw       []byte
}

// findDiscoveryLists returns every object in doc whose kind and apiVersion say
// APIGroupDiscoveryList, outermost first.
func findDiscoveryLists(doc []byte) []foundList {
	var found []foundList
	var walk func(raw json.RawMessage, at, place string)
	walk = func(raw json.RawMessage, at, place string) {
		var object map[string]json.RawMessage
		var array []json.RawMessage
		switch {
		case json.Unmarshal(raw, &object) == nil:
			var kind, apiVersion string
			_ = json.Unmarshal(object["kind"], &kind)
			_ = json.Unmarshal(object["apiVersion"], &apiVersion)
			if kind == "APIGroupDiscoveryList" && apiVersion == "apidiscovery.k8s.io/v2" {
				found = append(found, foundList{at: at, place: place, raw: raw})
				return
			}
			for _, key := range slices.Sorted(maps.Keys(object)) {
				walk(object[key], at+"."+key, place+"."+key)
			}
		case json.Unmarshal(raw, &array) == nil:
			for i, elem := range array {
				walk(elem, fmt.Sprintf("%s[%d]", at, i), place+"[]")
			}
		}
	}
	walk(doc, "", "")
	return found
}

// TestMergeSampleMatchesUpstreamHandler merges the realistic sample (a v1.35
// and a v1.36 kube-apiserver) and requires the exact body and ETag upstream's
// peer-aggregated handler serves on the v1.35 server, plain and pretty, and
// the checked-in golden files. Run with -update-merge-testdata to rewrite them.
func TestMergeSampleMatchesUpstreamHandler(t *testing.T) {
	local, peer := sampleAPIGroups(35), sampleAPIGroups(36)
	rm := aggregated.NewResourceManager("apis")
	for g, group := range local {
		for v, version := range group.Versions {
			rm.AddGroupVersion(group.Name, version)
			// Priorities reproduce the sample's order in the manager's sorted output.
			rm.SetGroupVersionPriority(metav1.GroupVersion{Group: group.Name, Version: version.Version}, 20000-100*g, 15-v)
		}
	}
	served, _ := aggregated.TestFetchFromCache(sampleIDv135, rm, nil)
	if got, want := marshalUpstreamItems(t, served.Items), marshalUpstreamItems(t, local); !bytes.Equal(got, want) {
		t.Fatalf("the resource manager serves the v1.35 sample differently:\n got: %s\nwant: %s", got, want)
	}
	handler := aggregated.NewPeerAggregatedDiscoveryHandler(sampleIDv135, rm, staticPeerResources{sampleIDv136: peer}, "apis")
	serve := func(userAgent string) (body []byte, etag string) {
		req := httptest.NewRequest(http.MethodGet, "/apis", nil)
		req.Header.Set("Accept", discoveryAccept)
		req.Header.Set("User-Agent", userAgent)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("upstream answered %d: %s", rec.Code, rec.Body)
		}
		return rec.Body.Bytes(), rec.Header().Get("ETag")
	}
	wantBody, wantETag := serve("kubectl/v1.36.0")

	files := map[string][]byte{
		"kube-apiserver-v1.35.json": sampleResponseBody(t, local),
		"kube-apiserver-v1.36.json": sampleResponseBody(t, peer),
		"merged.json":               wantBody,
		"merged.etag":               []byte(wantETag + "\n"),
	}
	if *updateMergeTestdata {
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(mergeTestdataDir, name), content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, content := range files {
		onDisk, err := os.ReadFile(filepath.Join(mergeTestdataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(onDisk, content) {
			t.Fatalf("%s/%s is stale; run go test -run TestMergeSampleMatchesUpstreamHandler -update-merge-testdata", mergeTestdataDir, name)
		}
	}

	servers := loadSampleServers(t, sampleIDv135, sampleIDv136)
	merged := GroupList{Items: MergeGroups(servers, sampleIDv135)}
	if got := ResponseBody(merged); !bytes.Equal(got, wantBody) {
		t.Fatalf("ResponseBody differs from upstream's body\n got: %s\nwant: %s", got, wantBody)
	}
	if got := ETag(merged); got != wantETag {
		t.Fatalf("ETag %s, upstream %s", got, wantETag)
	}
}

// sampleResponseBody is the body a server with these groups would serve.
func sampleResponseBody(t testing.TB, groups []apidiscoveryv2.APIGroupDiscovery) []byte {
	t.Helper()
	list := apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"},
		Items:    groups,
	}
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// loadSampleServers parses the checked-in sample documents; the first ID gets
// the v1.35 document, every further ID the v1.36 one.
func loadSampleServers(t testing.TB, ids ...string) []ServerGroups {
	t.Helper()
	servers := make([]ServerGroups, len(ids))
	for i, id := range ids {
		name := "kube-apiserver-v1.36.json"
		if i == 0 {
			name = "kube-apiserver-v1.35.json"
		}
		raw, err := os.ReadFile(filepath.Join(mergeTestdataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		list, err := ParseGroupList(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		servers[i] = ServerGroups{ServerID: id, Groups: list.Items}
	}
	return servers
}

// sampleResource describes one resource of the sample documents.
type sampleResource struct {
	name, singular, kind string
	namespaced           bool
	verbs                []string
	shortNames           []string
	categories           []string
	subresources         []string
}

var (
	verbsCRUD   = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	verbsCreate = []string{"create"}
)

// sampleAPIGroups is /apis of a kube-apiserver v1.<minor> with default feature
// gates, abridged to the GA groups. v1.36 adds admissionregistration.k8s.io/v1
// mutatingadmissionpolicies and mutatingadmissionpolicybindings (GA in 1.36).
func sampleAPIGroups(minor int) []apidiscoveryv2.APIGroupDiscovery {
	admission := []sampleResource{
		{"mutatingwebhookconfigurations", "mutatingwebhookconfiguration", "MutatingWebhookConfiguration", false, verbsCRUD, nil, []string{"api-extensions"}, nil},
		{"validatingadmissionpolicies", "validatingadmissionpolicy", "ValidatingAdmissionPolicy", false, verbsCRUD, nil, []string{"api-extensions"}, []string{"status"}},
		{"validatingadmissionpolicybindings", "validatingadmissionpolicybinding", "ValidatingAdmissionPolicyBinding", false, verbsCRUD, nil, []string{"api-extensions"}, nil},
		{"validatingwebhookconfigurations", "validatingwebhookconfiguration", "ValidatingWebhookConfiguration", false, verbsCRUD, nil, []string{"api-extensions"}, nil},
	}
	if minor >= 36 {
		admission = append([]sampleResource{
			{"mutatingadmissionpolicies", "mutatingadmissionpolicy", "MutatingAdmissionPolicy", false, verbsCRUD, nil, []string{"api-extensions"}, nil},
			{"mutatingadmissionpolicybindings", "mutatingadmissionpolicybinding", "MutatingAdmissionPolicyBinding", false, verbsCRUD, nil, []string{"api-extensions"}, nil},
		}, admission...)
	}
	hpa := []sampleResource{{"horizontalpodautoscalers", "horizontalpodautoscaler", "HorizontalPodAutoscaler", true, verbsCRUD, []string{"hpa"}, []string{"all"}, []string{"status"}}}
	type sampleVersion struct {
		version   string
		resources []sampleResource
	}
	groups := []struct {
		name     string
		versions []sampleVersion
	}{
		{"apiregistration.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"apiservices", "apiservice", "APIService", false, verbsCRUD, nil, []string{"api-extensions"}, []string{"status"}},
		}}}},
		{"apps", []sampleVersion{{"v1", []sampleResource{
			{"controllerrevisions", "controllerrevision", "ControllerRevision", true, verbsCRUD, nil, nil, nil},
			{"daemonsets", "daemonset", "DaemonSet", true, verbsCRUD, []string{"ds"}, []string{"all"}, []string{"status"}},
			{"deployments", "deployment", "Deployment", true, verbsCRUD, []string{"deploy"}, []string{"all"}, []string{"scale", "status"}},
			{"replicasets", "replicaset", "ReplicaSet", true, verbsCRUD, []string{"rs"}, []string{"all"}, []string{"scale", "status"}},
			{"statefulsets", "statefulset", "StatefulSet", true, verbsCRUD, []string{"sts"}, []string{"all"}, []string{"scale", "status"}},
		}}}},
		{"events.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"events", "event", "Event", true, verbsCRUD, []string{"ev"}, nil, nil},
		}}}},
		{"authentication.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", false, verbsCreate, nil, nil, nil},
			{"tokenreviews", "tokenreview", "TokenReview", false, verbsCreate, nil, nil, nil},
		}}}},
		{"authorization.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"localsubjectaccessreviews", "localsubjectaccessreview", "LocalSubjectAccessReview", true, verbsCreate, nil, nil, nil},
			{"selfsubjectaccessreviews", "selfsubjectaccessreview", "SelfSubjectAccessReview", false, verbsCreate, nil, nil, nil},
			{"selfsubjectrulesreviews", "selfsubjectrulesreview", "SelfSubjectRulesReview", false, verbsCreate, nil, nil, nil},
			{"subjectaccessreviews", "subjectaccessreview", "SubjectAccessReview", false, verbsCreate, nil, nil, nil},
		}}}},
		{"autoscaling", []sampleVersion{{"v2", hpa}, {"v1", hpa}}},
		{"batch", []sampleVersion{{"v1", []sampleResource{
			{"cronjobs", "cronjob", "CronJob", true, verbsCRUD, []string{"cj"}, []string{"all"}, []string{"status"}},
			{"jobs", "job", "Job", true, verbsCRUD, nil, []string{"all"}, []string{"status"}},
		}}}},
		{"certificates.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"certificatesigningrequests", "certificatesigningrequest", "CertificateSigningRequest", false, verbsCRUD, []string{"csr"}, nil, []string{"approval", "status"}},
		}}}},
		{"networking.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"ingressclasses", "ingressclass", "IngressClass", false, verbsCRUD, nil, nil, nil},
			{"ingresses", "ingress", "Ingress", true, verbsCRUD, []string{"ing"}, nil, []string{"status"}},
			{"ipaddresses", "ipaddress", "IPAddress", false, verbsCRUD, []string{"ip"}, nil, nil},
			{"networkpolicies", "networkpolicy", "NetworkPolicy", true, verbsCRUD, []string{"netpol"}, nil, nil},
			{"servicecidrs", "servicecidr", "ServiceCIDR", false, verbsCRUD, nil, nil, []string{"status"}},
		}}}},
		{"policy", []sampleVersion{{"v1", []sampleResource{
			{"poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", true, verbsCRUD, []string{"pdb"}, nil, []string{"status"}},
		}}}},
		{"rbac.authorization.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", false, verbsCRUD, nil, nil, nil},
			{"clusterroles", "clusterrole", "ClusterRole", false, verbsCRUD, nil, nil, nil},
			{"rolebindings", "rolebinding", "RoleBinding", true, verbsCRUD, nil, nil, nil},
			{"roles", "role", "Role", true, verbsCRUD, nil, nil, nil},
		}}}},
		{"storage.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"csidrivers", "csidriver", "CSIDriver", false, verbsCRUD, nil, nil, nil},
			{"csinodes", "csinode", "CSINode", false, verbsCRUD, nil, nil, nil},
			{"csistoragecapacities", "csistoragecapacity", "CSIStorageCapacity", true, verbsCRUD, nil, nil, nil},
			{"storageclasses", "storageclass", "StorageClass", false, verbsCRUD, []string{"sc"}, nil, nil},
			{"volumeattachments", "volumeattachment", "VolumeAttachment", false, verbsCRUD, nil, nil, []string{"status"}},
			{"volumeattributesclasses", "volumeattributesclass", "VolumeAttributesClass", false, verbsCRUD, []string{"vac"}, nil, nil},
		}}}},
		{"admissionregistration.k8s.io", []sampleVersion{{"v1", admission}}},
		{"apiextensions.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition", false, verbsCRUD, []string{"crd", "crds"}, []string{"api-extensions"}, []string{"status"}},
		}}}},
		{"scheduling.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"priorityclasses", "priorityclass", "PriorityClass", false, verbsCRUD, []string{"pc"}, nil, nil},
		}}}},
		{"coordination.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"leases", "lease", "Lease", true, verbsCRUD, nil, nil, nil},
		}}}},
		{"node.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"runtimeclasses", "runtimeclass", "RuntimeClass", false, verbsCRUD, nil, nil, nil},
		}}}},
		{"discovery.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"endpointslices", "endpointslice", "EndpointSlice", true, verbsCRUD, nil, nil, nil},
		}}}},
		{"flowcontrol.apiserver.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"flowschemas", "flowschema", "FlowSchema", false, verbsCRUD, nil, nil, []string{"status"}},
			{"prioritylevelconfigurations", "prioritylevelconfiguration", "PriorityLevelConfiguration", false, verbsCRUD, nil, nil, []string{"status"}},
		}}}},
		{"resource.k8s.io", []sampleVersion{{"v1", []sampleResource{
			{"deviceclasses", "deviceclass", "DeviceClass", false, verbsCRUD, nil, nil, nil},
			{"resourceclaims", "resourceclaim", "ResourceClaim", true, verbsCRUD, nil, nil, []string{"status"}},
			{"resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate", true, verbsCRUD, nil, nil, nil},
			{"resourceslices", "resourceslice", "ResourceSlice", false, verbsCRUD, nil, nil, nil},
		}}}},
	}
	out := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(groups))
	for _, g := range groups {
		group := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.name}}
		for _, v := range g.versions {
			version := apidiscoveryv2.APIVersionDiscovery{Version: v.version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
			for _, r := range v.resources {
				version.Resources = append(version.Resources, sampleResourceDiscovery(g.name, v.version, r))
			}
			group.Versions = append(group.Versions, version)
		}
		out = append(out, group)
	}
	return out
}

func sampleResourceDiscovery(group, version string, r sampleResource) apidiscoveryv2.APIResourceDiscovery {
	scope := apidiscoveryv2.ScopeCluster
	if r.namespaced {
		scope = apidiscoveryv2.ScopeNamespace
	}
	kind := &metav1.GroupVersionKind{Group: group, Version: version, Kind: r.kind}
	out := apidiscoveryv2.APIResourceDiscovery{
		Resource:         r.name,
		ResponseKind:     kind,
		Scope:            scope,
		SingularResource: r.singular,
		Verbs:            r.verbs,
		ShortNames:       r.shortNames,
		Categories:       r.categories,
	}
	for _, sub := range r.subresources {
		s := apidiscoveryv2.APISubresourceDiscovery{Subresource: sub, ResponseKind: kind, Verbs: []string{"get", "patch", "update"}}
		if sub == "scale" {
			s.ResponseKind = &metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
		}
		out.Subresources = append(out.Subresources, s)
	}
	return out
}

// discoveryGen generates random discovery documents as upstream's typed values.
// Names come from small pools so that servers overlap and conflict.
type discoveryGen struct {
	r *rand.Rand
}

func newDiscoveryGen(seed uint64) *discoveryGen {
	return &discoveryGen{r: rand.New(rand.NewPCG(seed, 0x5ce6a7e))}
}

var (
	genServerIDs   = []string{"apiserver-a", "apiserver-b", "apiserver-c", "apiserver-d", "apiserver-e", "apiserver-f", "apiserver-g"}
	genGroupNames  = []string{"apps", "batch", "policy", "storage.k8s.io", "widgets.example.com", "x.io", ""}
	genVersions    = []string{"v1", "v1beta1", "v2", "v1alpha1", "v2beta2"}
	genResources   = []string{"deployments", "gadgets", "leases", "pods", "things", "widgets"}
	genSubresource = []string{"approval", "log", "scale", "status"}
	genVerbs       = []string{"create", "delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch"}
	genWords       = []string{"all", "api-extensions", "Cluster", "Current", "Namespaced", "Stale", "w", "Widget"}
	// genTrickyStrings exercise encoding/json's escaping and UTF-8 repair.
	genTrickyStrings = []string{
		"<b>&amp;</b>", "line\u2028sep\u2029end", "bad\xffutf8\xc3", "quote\"back\\slash/", "ctl\x00\x01\x1f\b\f\n\r\t",
		"é日本🙂", "\x7f", "</script>", "\ufffd", "lone\xed\xa0\x80surrogate", " ",
	}
)

func (g *discoveryGen) chance(percent int) bool { return g.r.IntN(100) < percent }

func (g *discoveryGen) pick(pool []string) string {
	if g.chance(4) {
		return genTrickyStrings[g.r.IntN(len(genTrickyStrings))]
	}
	return pool[g.r.IntN(len(pool))]
}

// strings returns nil, an empty slice or up to max picks (repeats allowed).
func (g *discoveryGen) strings(pool []string, max int) []string {
	switch g.r.IntN(6) {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	out := make([]string, 1+g.r.IntN(max))
	for i := range out {
		out[i] = g.pick(pool)
	}
	return out
}

func (g *discoveryGen) gvk() metav1.GroupVersionKind {
	return metav1.GroupVersionKind{Group: g.pick(genGroupNames), Version: g.pick(genVersions), Kind: g.pick(genWords)}
}

func (g *discoveryGen) gvkPointer() *metav1.GroupVersionKind {
	if g.chance(30) {
		return nil
	}
	gvk := g.gvk()
	return &gvk
}

func (g *discoveryGen) subresource() apidiscoveryv2.APISubresourceDiscovery {
	s := apidiscoveryv2.APISubresourceDiscovery{
		Subresource:  g.pick(genSubresource),
		ResponseKind: g.gvkPointer(),
		Verbs:        g.strings(genVerbs, 4),
	}
	switch g.r.IntN(4) {
	case 0:
		s.AcceptedTypes = []metav1.GroupVersionKind{}
	case 1:
		s.AcceptedTypes = []metav1.GroupVersionKind{g.gvk()}
		if g.chance(50) {
			s.AcceptedTypes = append(s.AcceptedTypes, g.gvk())
		}
	}
	return s
}

func (g *discoveryGen) resource() apidiscoveryv2.APIResourceDiscovery {
	r := apidiscoveryv2.APIResourceDiscovery{
		Resource:         g.pick(genResources),
		ResponseKind:     g.gvkPointer(),
		Scope:            apidiscoveryv2.ResourceScope(g.pick([]string{"Cluster", "Namespaced", ""})),
		SingularResource: g.pick(genWords),
		Verbs:            g.strings(genVerbs, 6),
		ShortNames:       g.strings(genWords, 2),
		Categories:       g.strings(genWords, 2),
	}
	if !g.chance(40) {
		r.Subresources = make([]apidiscoveryv2.APISubresourceDiscovery, g.r.IntN(3))
		for i := range r.Subresources {
			r.Subresources[i] = g.subresource()
		}
	}
	return r
}

func (g *discoveryGen) version() apidiscoveryv2.APIVersionDiscovery {
	v := apidiscoveryv2.APIVersionDiscovery{
		Version:   g.pick(genVersions),
		Freshness: apidiscoveryv2.DiscoveryFreshness(g.pick([]string{"Current", "Stale", ""})),
	}
	for range g.r.IntN(4) {
		v.Resources = append(v.Resources, g.resource())
	}
	return v
}

func (g *discoveryGen) group() apidiscoveryv2.APIGroupDiscovery {
	group := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.pick(genGroupNames)}}
	if g.chance(5) {
		group.TypeMeta = metav1.TypeMeta{Kind: "APIGroupDiscovery", APIVersion: g.pick([]string{"apidiscovery.k8s.io/v2", ""})}
	}
	if g.chance(10) {
		group.Labels = map[string]string{g.pick(genWords): g.pick(genWords), g.pick(genWords): g.pick(genWords)}
	}
	if g.chance(10) {
		group.Annotations = map[string]string{g.pick(genWords): g.pick(genWords)}
	}
	for range g.r.IntN(4) {
		group.Versions = append(group.Versions, g.version())
	}
	return group
}

func (g *discoveryGen) groups() []apidiscoveryv2.APIGroupDiscovery {
	out := make([]apidiscoveryv2.APIGroupDiscovery, g.r.IntN(6))
	for i := range out {
		out[i] = g.group()
	}
	return out
}

// editSlice returns a copy of s with one random edit: an item removed, a new
// one inserted, two swapped (an order conflict), an item repeated with changes
// (a duplicate name) or one item changed in place.
func editSlice[T any](g *discoveryGen, s []T, fresh func() T, change func(T) T) []T {
	s = slices.Clone(s)
	if len(s) == 0 {
		return append(s, fresh())
	}
	i, j := g.r.IntN(len(s)), g.r.IntN(len(s))
	switch g.r.IntN(6) {
	case 0:
		return slices.Delete(s, i, i+1)
	case 1:
		return slices.Insert(s, i, fresh())
	case 2:
		s[i], s[j] = s[j], s[i]
	case 3:
		dup := s[i]
		if g.chance(50) {
			dup = change(dup)
		}
		return slices.Insert(s, j, dup)
	default:
		s[i] = change(s[i])
	}
	return s
}

func (g *discoveryGen) changeSubresource(s apidiscoveryv2.APISubresourceDiscovery) apidiscoveryv2.APISubresourceDiscovery {
	switch g.r.IntN(3) {
	case 0:
		s.Verbs = g.strings(genVerbs, 4)
	case 1:
		s.ResponseKind = g.gvkPointer()
	default:
		fresh := g.subresource()
		s.AcceptedTypes = fresh.AcceptedTypes
	}
	return s
}

func (g *discoveryGen) changeResource(r apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIResourceDiscovery {
	switch g.r.IntN(7) {
	case 0:
		r.Verbs = g.strings(genVerbs, 6)
	case 1:
		r.Verbs = slices.Clone(r.Verbs)
		g.r.Shuffle(len(r.Verbs), func(i, j int) { r.Verbs[i], r.Verbs[j] = r.Verbs[j], r.Verbs[i] })
	case 2:
		r.Subresources = editSlice(g, r.Subresources, g.subresource, g.changeSubresource)
	case 3:
		r.ShortNames, r.Categories = g.strings(genWords, 2), g.strings(genWords, 2)
	case 4:
		r.ResponseKind = g.gvkPointer()
	case 5:
		r.Scope, r.SingularResource = apidiscoveryv2.ResourceScope(g.pick(genWords)), g.pick(genWords)
	default:
		r.Subresources = nil
	}
	return r
}

func (g *discoveryGen) changeVersion(v apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIVersionDiscovery {
	if g.chance(20) {
		v.Freshness = apidiscoveryv2.DiscoveryFreshness(g.pick([]string{"Current", "Stale", ""}))
		return v
	}
	v.Resources = editSlice(g, v.Resources, g.resource, g.changeResource)
	return v
}

func (g *discoveryGen) changeGroup(group apidiscoveryv2.APIGroupDiscovery) apidiscoveryv2.APIGroupDiscovery {
	if g.chance(10) {
		group.Labels = map[string]string{"changed": g.pick(genWords)}
		return group
	}
	group.Versions = editSlice(g, group.Versions, g.version, g.changeVersion)
	return group
}

// serverSet returns 1 to 5 servers. Most derive from one base document with a
// few edits, some copy it or another server exactly, some are empty or
// unrelated. Documents sometimes spell out empty arrays and nulls that
// encoding/json would omit, as a document from another encoder might.
func (g *discoveryGen) serverSet() []rawServer {
	base := g.groups()
	ids := slices.Clone(genServerIDs)
	g.r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	servers := make([]rawServer, 1+g.r.IntN(5))
	for i := range servers {
		var items []apidiscoveryv2.APIGroupDiscovery
		switch choice := g.r.IntN(12); {
		case choice == 0:
			items = base
		case choice == 1 && i > 0:
			servers[i] = rawServer{id: ids[i], doc: servers[g.r.IntN(i)].doc}
			continue
		case choice == 2:
			if g.chance(50) {
				items = []apidiscoveryv2.APIGroupDiscovery{}
			}
		case choice == 3:
			items = g.groups()
		default:
			items = base
			for range 1 + g.r.IntN(4) {
				items = editSlice(g, items, g.group, g.changeGroup)
			}
		}
		servers[i] = rawServer{id: ids[i], doc: g.document(items)}
	}
	return servers
}

// localID is usually the lowest ID, as skewgate uses it, sometimes another
// server's and rarely one no server has.
func (g *discoveryGen) localID(servers []rawServer) string {
	switch n := g.r.IntN(20); {
	case n == 0:
		return "apiserver-absent"
	case n < 6:
		return servers[g.r.IntN(len(servers))].id
	}
	lowest := servers[0].id
	for _, s := range servers {
		lowest = min(lowest, s.id)
	}
	return lowest
}

// document marshals items as a server's response, sometimes rewritten with
// explicit empty arrays, nulls and unknown members.
func (g *discoveryGen) document(items []apidiscoveryv2.APIGroupDiscovery) []byte {
	list := apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"},
		Items:    items,
	}
	raw, err := json.Marshal(list)
	if err != nil {
		panic(err)
	}
	if g.chance(70) {
		return raw
	}
	var tree map[string]any
	if err := json.Unmarshal(raw, &tree); err != nil {
		panic(err)
	}
	if g.chance(30) {
		tree["metadata"] = map[string]any{"resourceVersion": "42"}
	}
	g.spellOutEmpties(tree, "items", "versions", "resources", "subresources", "acceptedTypes")
	out, err := json.Marshal(tree)
	if err != nil {
		panic(err)
	}
	return out
}

// emptySpellings are members encoding/json omits when empty, with what another
// encoder might write instead, plus a member no version of the types knows.
var emptySpellings = map[string][]any{
	"versions":      {[]any{}, nil},
	"resources":     {[]any{}, nil},
	"freshness":     {nil},
	"responseKind":  {nil},
	"shortNames":    {[]any{}, nil},
	"categories":    {[]any{}, nil},
	"subresources":  {[]any{}, nil},
	"acceptedTypes": {[]any{}, nil},
	"futureField":   {"x", 1.5, map[string]any{"a": []any{}}},
}

// metadataSpellings are ObjectMeta members that encode to nothing, as older
// servers or other encoders write them.
var metadataSpellings = map[string]any{
	"creationTimestamp": nil,
	"labels":            map[string]any{},
	"uid":               "",
	"generateName":      nil,
	"ownerReferences":   nil,
}

// spellOutEmpties walks the members along path and adds, at random, empty
// spellings of absent members to the objects found there and to their metadata.
func (g *discoveryGen) spellOutEmpties(node any, path ...string) {
	switch n := node.(type) {
	case []any:
		for _, elem := range n {
			g.spellOutEmpties(elem, path...)
		}
	case map[string]any:
		// Sorted, so that the random choices do not depend on map order.
		for _, member := range slices.Sorted(maps.Keys(emptySpellings)) {
			if _, present := n[member]; !present && g.chance(15) {
				spellings := emptySpellings[member]
				n[member] = spellings[g.r.IntN(len(spellings))]
			}
		}
		if metadata, ok := n["metadata"].(map[string]any); ok {
			for _, member := range slices.Sorted(maps.Keys(metadataSpellings)) {
				if _, present := metadata[member]; !present && g.chance(15) {
					metadata[member] = metadataSpellings[member]
				}
			}
		}
		for _, member := range path {
			if child, ok := n[member]; ok {
				g.spellOutEmpties(child, path...)
			}
		}
	}
}
