package discovery

import "testing"

// FuzzNegotiateDiscovery holds NegotiateDiscovery to the apiserver's own
// discovery handler chain for arbitrary Accept headers.
func FuzzNegotiateDiscovery(f *testing.F) {
	requireUpstreamGates(f)
	for _, accept := range oracleAcceptHeaders {
		f.Add(accept)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		checkNegotiationConsistent(t, accept)
		if got, want := NegotiateDiscovery(accept), upstreamNegotiation(t, accept); got != want {
			t.Errorf("NegotiateDiscovery(%q) = %+v, upstream %+v", accept, got, want)
		}
	})
}
