package discovery

import (
	"crypto/sha512"
	"math/rand/v2"
	"testing"
)

func TestSHA512MatchesCryptoSHA512(t *testing.T) {
	rng := rand.New(rand.NewPCG(512, 1))
	for _, size := range []int{0, 1, 55, 111, 112, 113, 127, 128, 129, 239, 240, 255, 256, 1000, 4096, 100_003} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		// Feed in random chunk sizes so that block boundaries fall everywhere.
		d := NewSHA512()
		for rest := data; len(rest) > 0; {
			n := min(len(rest), rng.IntN(300))
			d.Write(rest[:n])
			rest = rest[n:]
		}
		if got, want := d.Sum(), sha512.Sum512(data); got != want {
			t.Errorf("size %d: %x; want %x", size, got, want)
		}
	}
}
