package discovery

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	genericfeatures "k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientdiscovery "k8s.io/client-go/discovery"
)

// The oracle is the apiserver's own /apis handler chain, run in-process: the
// discovery wrapper in front of a legacy handler, the local resource manager and
// the peer-aggregated handler. A peer contributes a group of its own, so the
// body tells the peer-aggregated view from the local (nopeer) one.
const (
	oracleLegacyMarker = "legacy APIGroupList"
	oracleLocalGroup   = "local.skewgate.example"
	oraclePeerGroup    = "peer.skewgate.example"
)

type oraclePeerProvider struct{}

func (oraclePeerProvider) GetPeerResources() map[string][]apidiscoveryv2.APIGroupDiscovery {
	return map[string][]apidiscoveryv2.APIGroupDiscovery{
		"apiserver-peer": {{
			ObjectMeta: metav1.ObjectMeta{Name: oraclePeerGroup},
			Versions:   []apidiscoveryv2.APIVersionDiscovery{oracleVersion("widgets")},
		}},
	}
}

func oracleVersion(resource string) apidiscoveryv2.APIVersionDiscovery {
	return apidiscoveryv2.APIVersionDiscovery{
		Version:   "v1",
		Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
		Resources: []apidiscoveryv2.APIResourceDiscovery{{
			Resource:         resource,
			ResponseKind:     &metav1.GroupVersionKind{Group: oracleLocalGroup, Version: "v1", Kind: "Widget"},
			Scope:            apidiscoveryv2.ScopeNamespace,
			SingularResource: strings.TrimSuffix(resource, "s"),
			Verbs:            []string{"get", "list"},
		}},
	}
}

var upstreamDiscoveryHandler = sync.OnceValue(func() http.Handler {
	local := aggregated.NewResourceManager("apis")
	local.AddGroupVersion(oracleLocalGroup, oracleVersion("gadgets"))
	peer := aggregated.NewPeerAggregatedDiscoveryHandler("apiserver-local", local, oraclePeerProvider{}, "apis")
	legacy := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(oracleLegacyMarker))
	})
	return aggregated.WrapAggregatedDiscoveryToHandler(legacy, local, peer)
})

// requireUpstreamGates fails unless the apiserver library runs with the gates
// NegotiateDiscovery models; a change of defaults must be noticed, not absorbed.
func requireUpstreamGates(t testing.TB) {
	t.Helper()
	gates := utilfeature.DefaultFeatureGate
	if !gates.Enabled(genericfeatures.UnknownVersionInteroperabilityProxy) {
		t.Fatal("UnknownVersionInteroperabilityProxy is off: upstream would not distinguish nopeer")
	}
	if !gates.Enabled(genericfeatures.AggregatedDiscoveryRemoveBetaType) {
		t.Fatal("AggregatedDiscoveryRemoveBetaType is off: upstream would aggregate v2beta1")
	}
	if gates.Enabled(genericfeatures.CBORServingAndStorage) {
		t.Fatal("CBORServingAndStorage is on: upstream would serve CBOR")
	}
}

// upstreamServe sends one GET /apis with accept as the only Accept line (none
// when empty) and classifies the answer.
func upstreamServe(t testing.TB, accept string) (format DiscoveryFormat, noPeer bool) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/apis", nil)
	if accept != "" {
		req.Header["Accept"] = []string{accept}
	}
	rec := httptest.NewRecorder()
	upstreamDiscoveryHandler().ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if rec.Code != http.StatusOK {
		t.Fatalf("Accept %q: upstream answered %d: %s", accept, rec.Code, body)
	}
	if string(body) == oracleLegacyMarker {
		return FormatLegacy, false
	}
	contentType := rec.Header().Get("Content-Type")
	mediaType, _, _ := strings.Cut(contentType, ";")
	switch mediaType {
	case "application/json":
		format = FormatAggregatedJSON
	case "application/yaml", "application/vnd.kubernetes.protobuf":
		format = FormatAggregatedOther
	default:
		t.Fatalf("Accept %q: unexpected upstream Content-Type %q", accept, contentType)
	}
	if !bytes.Contains(body, []byte(oracleLocalGroup)) {
		t.Fatalf("Accept %q: upstream aggregated body lacks the local group: %q", accept, body)
	}
	return format, !bytes.Contains(body, []byte(oraclePeerGroup))
}

// upstreamNegotiation is what upstream does with accept. AcceptsAggregatedJSON
// comes from serving each comma-separated element alone: goautoneg parses every
// element independently, so alone it yields exactly the clause it yields in the
// full header.
func upstreamNegotiation(t testing.TB, accept string) DiscoveryNegotiation {
	t.Helper()
	var want DiscoveryNegotiation
	want.Format, want.NoPeer = upstreamServe(t, accept)
	tried := make(map[string]bool)
	for _, element := range strings.Split(accept, ",") {
		if want.AcceptsAggregatedJSON || tried[element] {
			continue
		}
		tried[element] = true
		format, noPeer := upstreamServe(t, element)
		want.AcceptsAggregatedJSON = format == FormatAggregatedJSON && !noPeer
	}
	return want
}

// acceptKubectl is what kubectl 1.35 (client-go v0.35) sends for discovery;
// v0.37 dropped the v2beta1 element.
const acceptKubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList," +
	"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"

// Shorthands for the oracle table.
const (
	acceptV2Params      = ";g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptV2beta1Params = ";g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
	acceptJSONV2        = "application/json" + acceptV2Params
	acceptYAMLV2        = "application/yaml" + acceptV2Params
	acceptProtobufV2    = "application/vnd.kubernetes.protobuf" + acceptV2Params
)

// acceptClientGoDefault and acceptClientGoNoPeer are client-go v0.37's two
// aggregated discovery headers.
var (
	acceptClientGoDefault = clientdiscovery.AcceptV2 + "," + clientdiscovery.AcceptV1
	acceptClientGoNoPeer  = clientdiscovery.AcceptV2NoPeer + "," + acceptClientGoDefault
)

func repeatAcceptClause(clause string, n int) string {
	return strings.TrimSuffix(strings.Repeat(clause+",", n), ",")
}

var oracleAcceptHeaders = []string{
	// Real clients.
	clientdiscovery.AcceptV1,
	clientdiscovery.AcceptV2,
	clientdiscovery.AcceptV2NoPeer,
	acceptClientGoDefault,
	acceptClientGoNoPeer,
	acceptKubectl,
	"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
	"application/vnd.kubernetes.protobuf, */*",
	"application/json, */*",
	"text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
	acceptProtobufV2 + "," + acceptJSONV2 + ";q=0.9,application/json;q=0.8",
	// Empty, blank and garbage.
	"",
	" ",
	"\t",
	",",
	",,,",
	";;;",
	"garbage",
	"application",
	"/json" + acceptV2Params,
	"application/" + acceptV2Params,
	"application/json/extra" + acceptV2Params,
	"application/json/" + acceptV2Params,
	"Application/JSON" + acceptV2Params,
	"application/jsón" + acceptV2Params,
	"\x00" + acceptJSONV2,
	acceptJSONV2 + "\x00",
	// Each representation alone, and nopeer.
	acceptJSONV2,
	acceptYAMLV2,
	acceptProtobufV2,
	acceptJSONV2 + ";profile=nopeer",
	acceptYAMLV2 + ";profile=nopeer",
	acceptProtobufV2 + ";profile=nopeer",
	"application/cbor" + acceptV2Params,
	"application/cbor" + acceptV2Params + "," + acceptJSONV2,
	// Wildcards.
	"*",
	"*/*",
	"*/",
	"application/*",
	"*/*" + acceptV2Params,
	"*" + acceptV2Params,
	"*/" + acceptV2Params,
	"application/*" + acceptV2Params,
	"*/json" + acceptV2Params,
	"*/*" + acceptV2Params + ";profile=nopeer",
	"*/*" + acceptV2Params + ";q=0.9," + acceptYAMLV2 + ";q=0.5",
	"application/*" + acceptV2Params + "," + acceptYAMLV2 + ";q=0.1",
	"*/*;q=0.8," + acceptJSONV2 + ";q=0.5",
	// Parameter order, spacing and tabs.
	"application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io",
	"application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList",
	"application/json;g = apidiscovery.k8s.io;v = v2;as = APIGroupDiscoveryList",
	"  application/json  " + acceptV2Params + "  ",
	"application/json ;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
	"application / json" + acceptV2Params,
	"application/json;\tg=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
	"application/json;g=apidiscovery.k8s.io;v=v2\t;as=APIGroupDiscoveryList",
	"\t" + acceptJSONV2,
	acceptJSONV2 + "\t",
	"application/json;;g=apidiscovery.k8s.io;;v=v2;;as=APIGroupDiscoveryList;;",
	acceptJSONV2 + ",",
	"," + acceptJSONV2,
	// Missing, wrong and malformed parameters.
	"application/json;g=apidiscovery.k8s.io;v=v2",
	"application/json;g=apidiscovery.k8s.io;v=v1;as=APIGroupDiscoveryList",
	"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupList",
	"application/json;G=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
	"application/json;g=apidiscovery.k8s.io;v=v2;as=apigroupdiscoverylist",
	`application/json;g=apidiscovery.k8s.io;v="v2";as=APIGroupDiscoveryList`,
	"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList=",
	"application/json;g=apidiscovery.k8s.io;v=v2=v2;as=APIGroupDiscoveryList",
	"application/json;g==;v=v2;as=APIGroupDiscoveryList",
	acceptJSONV2 + ";g==",
	acceptJSONV2 + ";pretty=1",
	acceptJSONV2 + ";export=1",
	acceptJSONV2 + ";foo=bar;x",
	// v2beta1 and duplicates (the last occurrence wins).
	"application/json" + acceptV2beta1Params,
	"application/vnd.kubernetes.protobuf" + acceptV2beta1Params,
	"application/json" + acceptV2beta1Params + ";profile=nopeer," + acceptJSONV2,
	acceptJSONV2 + ";v=v2beta1",
	"application/json" + acceptV2beta1Params + ";v=v2",
	// Server version and stream.
	acceptJSONV2 + ";sv=v1",
	acceptJSONV2 + ";sv=",
	acceptJSONV2 + ";sv= ",
	acceptJSONV2 + ";stream=watch",
	acceptYAMLV2 + ";stream=watch",
	"application/*" + acceptV2Params + ";stream=watch",
	acceptJSONV2 + ";stream=other",
	acceptJSONV2 + ";stream=",
	acceptYAMLV2 + ";stream=watch," + acceptJSONV2,
	// Profile spelling.
	acceptJSONV2 + `;profile="nopeer"`,
	acceptJSONV2 + ";profile=NoPeer",
	acceptJSONV2 + ";profile= nopeer ",
	acceptJSONV2 + ";profile=",
	acceptJSONV2 + ";profile=nopeer;profile=local",
	acceptJSONV2 + ";profile=local;profile=nopeer",
	acceptJSONV2 + ";Profile=nopeer",
	acceptJSONV2 + ";profile=nopeer ;",
	// Clause order and q.
	acceptJSONV2 + "," + acceptJSONV2 + ";profile=nopeer",
	acceptJSONV2 + ";q=0.5," + acceptJSONV2 + ";profile=nopeer",
	acceptJSONV2 + ";profile=nopeer," + acceptJSONV2 + ";q=1",
	acceptProtobufV2 + ";q=0.9," + acceptJSONV2,
	acceptJSONV2 + ";q=0",
	acceptJSONV2 + ";q=0," + acceptYAMLV2 + ";q=0.5",
	acceptJSONV2 + ";q=0.5," + acceptYAMLV2,
	"application/json;q=1" + acceptV2Params,
	acceptJSONV2 + ";q=abc",
	acceptJSONV2 + ";q= 0.5," + acceptYAMLV2 + ";q=0.1",
	"application/json;q=0.5 " + acceptV2Params + "," + acceptYAMLV2 + ";q=0.1",
	acceptJSONV2 + ";q=2," + acceptProtobufV2 + ";q=3",
	acceptJSONV2 + ";q=-1," + acceptYAMLV2 + ";q=0",
	acceptYAMLV2 + ";q=NaN," + acceptJSONV2 + ";q=0.1",
	acceptYAMLV2 + ";q=1e50," + acceptJSONV2 + ";q=Inf",
	acceptYAMLV2 + ";q=0x1p-2," + acceptJSONV2 + ";q=0.2",
	acceptYAMLV2 + ";q=0.3;q=0.1," + acceptJSONV2 + ";q=0.2",
	"*/*;q=0.1," + acceptJSONV2 + ";profile=nopeer;q=0.2",
	acceptYAMLV2 + ";profile=nopeer," + acceptJSONV2,
	// More than twelve clauses: upstream's sort.Sort leaves insertion sort.
	repeatAcceptClause("application/json;q=0.1", 13) + "," + acceptYAMLV2 + ";q=0.05",
	repeatAcceptClause("*/*;q=0.9", 14) + "," + acceptProtobufV2 + ";q=0.5," + acceptJSONV2 + ";q=0.4",
	repeatAcceptClause(acceptYAMLV2+";q=NaN", 7) + "," + repeatAcceptClause("*/*"+acceptV2Params+";q=0.7", 7) + "," + acceptJSONV2 + ";profile=nopeer;q=0.8",
	// Fifteen clauses whose winner differs between insertion sort and pdqsort.
	"*/*" + acceptV2Params + ",*/*;q=0.1,application/json,*/*,*/*;q=0.1,application/json,application/json;q=0.5," +
		"application/json;q=0.9,*/*" + acceptV2Params + ",*/*;q=0.5," + acceptProtobufV2 + ";q=NaN," +
		"*/*;q=0.1,*/*;q=0.9,application/json,*/*;q=0.9",
	repeatAcceptClause("application/*"+acceptV2Params+";stream=watch;q=0.2", 20) + "," + repeatAcceptClause(acceptProtobufV2+";q=0.3", 20),
}

func TestNegotiateDiscoveryMatchesUpstreamHandler(t *testing.T) {
	requireUpstreamGates(t)
	if len(oracleAcceptHeaders) < 80 {
		t.Fatalf("only %d headers in the oracle table", len(oracleAcceptHeaders))
	}
	for _, accept := range oracleAcceptHeaders {
		t.Run(accept, func(t *testing.T) {
			want := upstreamNegotiation(t, accept)
			if got := NegotiateDiscovery(accept); got != want {
				t.Errorf("NegotiateDiscovery(%q) = %+v, upstream %+v", accept, got, want)
			}
		})
	}
}

func TestNegotiateDiscoveryMatchesUpstreamHandlerOnRandomHeaders(t *testing.T) {
	requireUpstreamGates(t)
	rng := rand.New(rand.NewPCG(1, 37))
	for range 3000 {
		accept := randomAcceptHeader(rng, 80)
		if got, want := NegotiateDiscovery(accept), upstreamNegotiation(t, accept); got != want {
			t.Fatalf("NegotiateDiscovery(%q) = %+v, upstream %+v", accept, got, want)
		}
	}
}

// The table must reach every outcome, or agreement with upstream proves little.
func TestOracleTableCoversEveryOutcome(t *testing.T) {
	seen := make(map[DiscoveryNegotiation]bool)
	for _, accept := range oracleAcceptHeaders {
		seen[NegotiateDiscovery(accept)] = true
	}
	for _, format := range []DiscoveryFormat{FormatLegacy, FormatAggregatedJSON, FormatAggregatedOther} {
		for _, noPeer := range []bool{false, true} {
			for _, acceptsJSON := range []bool{false, true} {
				outcome := DiscoveryNegotiation{Format: format, NoPeer: noPeer, AcceptsAggregatedJSON: acceptsJSON}
				impossible := (format == FormatLegacy && (noPeer || acceptsJSON)) ||
					(format == FormatAggregatedJSON && !noPeer && !acceptsJSON)
				if !impossible && !seen[outcome] {
					t.Errorf("no header in the oracle table yields %+v", outcome)
				}
			}
		}
	}
}
