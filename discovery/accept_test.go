package discovery

import (
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	clientdiscovery "k8s.io/client-go/discovery"
)

func TestNegotiateDiscoveryFollowsUpstreamRules(t *testing.T) {
	peerJSON := DiscoveryNegotiation{Format: FormatAggregatedJSON, AcceptsAggregatedJSON: true}
	localJSON := DiscoveryNegotiation{Format: FormatAggregatedJSON, NoPeer: true}
	peerOther := DiscoveryNegotiation{Format: FormatAggregatedOther}
	legacy := DiscoveryNegotiation{}
	tests := []struct {
		name   string
		accept string
		want   DiscoveryNegotiation
	}{
		{"missing Accept is legacy", "", legacy},
		{"plain JSON is legacy", "application/json", legacy},
		{"client-go default is peer-aggregated JSON", acceptClientGoDefault, peerJSON},
		{"client-go nopeer is local JSON", acceptClientGoNoPeer, DiscoveryNegotiation{
			Format: FormatAggregatedJSON, NoPeer: true, AcceptsAggregatedJSON: true,
		}},
		{"kubectl is peer-aggregated JSON", acceptKubectl, peerJSON},
		{"v2beta1 alone is legacy (the server answers 406)", "application/json" + acceptV2beta1Params, legacy},
		{"v2beta1 with a JSON fallback is legacy", "application/json" + acceptV2beta1Params + ",application/json", legacy},
		{"protobuf is aggregated other", acceptProtobufV2, peerOther},
		{"YAML is aggregated other", acceptYAMLV2, peerOther},
		{"CBOR is not served", "application/cbor" + acceptV2Params, legacy},
		{"protobuf first still lets the gateway know JSON is accepted", acceptProtobufV2 + "," + acceptJSONV2 + ";q=0.9",
			DiscoveryNegotiation{Format: FormatAggregatedOther, AcceptsAggregatedJSON: true}},
		{"parameter order does not matter", "application/json;as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=v2", peerJSON},
		{"spaces after semicolons are trimmed", "application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList", peerJSON},
		{"tabs are not trimmed", "application/json;\tg=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", legacy},
		{"parameter names are case-sensitive", "application/json;G=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", legacy},
		{"unknown parameters are ignored", acceptJSONV2 + ";foo=bar", peerJSON},
		{"a server version is rejected", acceptJSONV2 + ";sv=v1", legacy},
		{"the later duplicate wins", acceptJSONV2 + ";v=v2beta1", legacy},
		{"a quoted nopeer is not nopeer", acceptJSONV2 + `;profile="nopeer"`, peerJSON},
		{"NoPeer is not nopeer", acceptJSONV2 + ";profile=NoPeer", peerJSON},
		{"the first equal-q clause wins", acceptJSONV2 + "," + acceptJSONV2 + ";profile=nopeer", peerJSON},
		{"a higher q wins", acceptJSONV2 + ";q=0.5," + acceptJSONV2 + ";profile=nopeer", DiscoveryNegotiation{
			Format: FormatAggregatedJSON, NoPeer: true, AcceptsAggregatedJSON: true,
		}},
		{"q=0 is still served", acceptJSONV2 + ";q=0", peerJSON},
		{"a concrete type beats a wildcard with higher q", "*/*" + acceptV2Params + ";q=0.9," + acceptYAMLV2 + ";q=0.5",
			DiscoveryNegotiation{Format: FormatAggregatedOther, AcceptsAggregatedJSON: true}},
		{"a full wildcard gets JSON", "*/*" + acceptV2Params, peerJSON},
		{"a type wildcard gets JSON", "application/*" + acceptV2Params, peerJSON},
		{"a bare star is a full wildcard", "*" + acceptV2Params, peerJSON},
		{"a subtype-only wildcard matches nothing", "*/json" + acceptV2Params, legacy},
		{"YAML cannot stream", acceptYAMLV2 + ";stream=watch", legacy},
		{"nopeer JSON is local and no peer-aggregated JSON is accepted", acceptJSONV2 + ";profile=nopeer", localJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NegotiateDiscovery(tt.accept); got != tt.want {
				t.Errorf("NegotiateDiscovery(%q) = %+v, want %+v", tt.accept, got, tt.want)
			}
		})
	}
}

func TestNegotiateDiscoveryDoesNotAllocateForTypicalHeaders(t *testing.T) {
	headers := map[string]string{
		"client-go default": acceptClientGoDefault,
		"client-go nopeer":  acceptClientGoNoPeer,
		"kubectl":           acceptKubectl,
		"legacy":            clientdiscovery.AcceptV1,
		"protobuf":          acceptProtobufV2 + "," + acceptJSONV2 + ";q=0.9,application/json;q=0.8",
		"browser":           "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
		"twelve clauses":    repeatAcceptClause(acceptYAMLV2+";q=0.5", 6) + "," + repeatAcceptClause("*/*"+acceptV2Params, 6),
	}
	for name, accept := range headers {
		t.Run(name, func(t *testing.T) {
			if allocs := testing.AllocsPerRun(100, func() { NegotiateDiscovery(accept) }); allocs != 0 {
				t.Errorf("NegotiateDiscovery(%q) allocates %v times", accept, allocs)
			}
		})
	}
}

// sortClauses must order exactly as sort.Sort does, including for q values
// such as NaN that make goautoneg's comparison inconsistent.
func TestSortClausesReproducesSortSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 37))
	qs := []float64{0, 0.1, 0.5, 0.9, 1, 2, math.NaN(), math.Inf(1)}
	for round := range 2000 {
		clauses := make([]acceptClause, rng.IntN(2*insertionSortMax+4))
		for i := range clauses {
			clauses[i] = acceptClause{
				q:          qs[rng.IntN(len(qs))],
				anyType:    rng.IntN(3) == 0,
				anySubtype: rng.IntN(3) == 0,
				noPeer:     rng.IntN(2) == 0,
				format:     DiscoveryFormat(rng.IntN(3)),
				aggregated: rng.IntN(2) == 0,
			}
		}
		want := append(clauseOrder(nil), clauses...)
		sort.Sort(want)
		got := sortClauses(clauses)
		for i := range want {
			a, b := got[i], want[i]
			if math.Float64bits(a.q) != math.Float64bits(b.q) || a.anyType != b.anyType || a.anySubtype != b.anySubtype ||
				a.noPeer != b.noPeer || a.format != b.format || a.aggregated != b.aggregated {
				t.Fatalf("round %d, %d clauses: position %d is %+v, sort.Sort put %+v", round, len(want), i, a, b)
			}
		}
	}
}

// acceptHeaderPieces are fragments that random headers are assembled from:
// media ranges, every parameter the negotiation looks at, and separators.
var acceptHeaderPieces = []string{
	"application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/cbor", "*/*", "*",
	"application/*", "text/html", ";g=apidiscovery.k8s.io", ";v=v2", ";v=v2beta1", ";as=APIGroupDiscoveryList",
	";profile=nopeer", ";profile=\"nopeer\"", ";q=0.5", ";q=0.9", ";q=0", ";q=NaN", ";q=2", ";sv=v1", ";stream=watch",
	",", ",", ",", " ", "\t", "=", ";", "/",
	acceptV2Params, acceptV2Params, acceptV2Params, acceptV2Params,
}

// randomAcceptHeader assembles up to maxPieces fragments; long headers reach
// beyond twelve clauses.
func randomAcceptHeader(rng *rand.Rand, maxPieces int) string {
	var b strings.Builder
	for range rng.IntN(maxPieces + 1) {
		b.WriteString(acceptHeaderPieces[rng.IntN(len(acceptHeaderPieces))])
	}
	return b.String()
}

// An Accept header can only produce a consistent outcome: legacy carries no
// flags, and peer-aggregated JSON implies that aggregated JSON is accepted.
func TestNegotiateDiscoveryOutcomesAreConsistent(t *testing.T) {
	rng := rand.New(rand.NewPCG(4020, 1))
	for range 5000 {
		checkNegotiationConsistent(t, randomAcceptHeader(rng, 60))
	}
}

func checkNegotiationConsistent(t *testing.T, accept string) {
	t.Helper()
	got := NegotiateDiscovery(accept)
	if got.Format == FormatLegacy && (got.NoPeer || got.AcceptsAggregatedJSON) {
		t.Fatalf("NegotiateDiscovery(%q) = %+v: legacy with flags", accept, got)
	}
	if got.Format == FormatAggregatedJSON && !got.NoPeer && !got.AcceptsAggregatedJSON {
		t.Fatalf("NegotiateDiscovery(%q) = %+v: peer-aggregated JSON not reported as accepted", accept, got)
	}
}

func BenchmarkNegotiateDiscovery(b *testing.B) {
	headers := []struct{ name, accept string }{
		{"client-go", acceptClientGoDefault},
		{"client-go-nopeer", acceptClientGoNoPeer},
		{"kubectl", acceptKubectl},
	}
	for _, h := range headers {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				NegotiateDiscovery(h.accept)
			}
		})
	}
}
