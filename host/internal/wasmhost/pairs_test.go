package wasmhost

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestPairsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := map[string][][2]string{
		"single":       {{"x-tenant", "acme"}},
		"empty values": {{"a", ""}, {"", "b"}, {"", ""}},
		"pseudo":       {{":path", "/api"}, {":authority", "kube"}},
		"binary":       {{"k\x01\xff", "v\x00inner"}},
	}
	var random [][2]string
	for range 200 {
		random = append(random, [2]string{strings.Repeat("k", rng.IntN(40)), strings.Repeat("v", rng.IntN(400))})
	}
	tests["random"] = random
	for name, pairs := range tests {
		t.Run(name, func(t *testing.T) {
			decoded, err := decodePairs(appendPairs(nil, pairs))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(decoded, pairs) {
				t.Fatalf("round trip changed the pairs: %q", decoded)
			}
		})
	}
}

func TestPairsEncodingLayout(t *testing.T) {
	got := appendPairs(nil, [][2]string{{"ab", "c"}})
	want := []byte{1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 'a', 'b', 0, 'c', 0}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding = %v, want %v", got, want)
	}
}

func TestDecodePairsEnforcesCppHostLimitsAndFraming(t *testing.T) {
	encodeCount := func(n uint32) []byte { return binary.LittleEndian.AppendUint32(nil, n) }
	atLimit := make([][2]string, maxPairsCount)
	overLimit := make([][2]string, maxPairsCount+1)
	tests := []struct {
		name    string
		input   []byte
		want    int
		wantErr error
	}{
		{name: "zero bytes is an empty map", input: nil},
		{name: "single NUL is an empty map", input: []byte{0}},
		{name: "1024 pairs accepted", input: appendPairs(nil, atLimit), want: maxPairsCount},
		{name: "1025 pairs rejected", input: appendPairs(nil, overLimit), wantErr: errPairsTooMany},
		{name: "count over limit without data", input: encodeCount(1 << 31), wantErr: errPairsTooMany},
		{name: "over 1 MiB rejected", input: appendPairs(nil, [][2]string{{"k", strings.Repeat("v", maxPairsBytes)}}), wantErr: errPairsTooLarge},
		{name: "exactly 1 MiB accepted", input: appendPairs(nil, [][2]string{{"k", strings.Repeat("v", maxPairsBytes-15)}}), want: 1},
		{name: "sizes truncated", input: append(encodeCount(2), 1, 0, 0, 0), wantErr: errPairsTruncated},
		{name: "data truncated", input: appendPairs(nil, [][2]string{{"key", "value"}})[:20], wantErr: errPairsTruncated},
		{name: "missing NUL", input: bytes.Replace(appendPairs(nil, [][2]string{{"key", "value"}}), []byte("key\x00"), []byte("keyX"), 1), wantErr: errPairsNoNUL},
		{name: "length overflow", input: append(encodeCount(1), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 'a', 0), wantErr: errPairsTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pairs, err := decodePairs(tt.input)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error = %v, want %v", err, tt.wantErr)
			}
			if len(pairs) != tt.want {
				t.Fatalf("decoded %d pairs, want %d", len(pairs), tt.want)
			}
		})
	}
}

func FuzzDecodePairs(f *testing.F) {
	f.Add(appendPairs(nil, [][2]string{{":path", "/"}, {"x-tenant", "acme"}}))
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0})
	f.Add(appendPairs(nil, make([][2]string, 3)))
	f.Fuzz(func(t *testing.T, data []byte) {
		pairs, err := decodePairs(data)
		if err != nil {
			if pairs != nil {
				t.Fatalf("error %v with pairs %q", err, pairs)
			}
			return
		}
		if len(pairs) > maxPairsCount {
			t.Fatalf("decoded %d pairs", len(pairs))
		}
		// Anything accepted re-encodes to a prefix of the input (trailing bytes are ignored, as in cpp-host).
		if len(data) >= 4 {
			if re := appendPairs(nil, pairs); !bytes.HasPrefix(data, re) {
				t.Fatalf("re-encoding %q is not a prefix of the input", pairs)
			}
		}
	})
}
