package discovery

import (
	"encoding/binary"
	"math/bits"
)

// SHA512 is SHA-512 (FIPS 180-4) for code compiled into the plugin: the ETag
// and the plugin's authorization cache keys need nothing else from crypto, and
// crypto/sha512 (like crypto/sha256) links the FIPS 140 module's self-tests,
// DRBG and AES into the plugin, about 150 to 200 KiB of Wasm. Tests compare it
// with crypto/sha512.
type SHA512 struct {
	h      [8]uint64
	block  [128]byte
	filled int
	length uint64
}

// The initial hash value and round constants are the first 64 bits of the
// fractional parts of the square roots of the first 8 primes and of the cube
// roots of the first 80 primes.
var sha512Init = [8]uint64{
	0x6a09e667f3bcc908, 0xbb67ae8584caa73b, 0x3c6ef372fe94f82b, 0xa54ff53a5f1d36f1,
	0x510e527fade682d1, 0x9b05688c2b3e6c1f, 0x1f83d9abfb41bd6b, 0x5be0cd19137e2179,
}

var sha512K = [80]uint64{
	0x428a2f98d728ae22, 0x7137449123ef65cd, 0xb5c0fbcfec4d3b2f, 0xe9b5dba58189dbbc,
	0x3956c25bf348b538, 0x59f111f1b605d019, 0x923f82a4af194f9b, 0xab1c5ed5da6d8118,
	0xd807aa98a3030242, 0x12835b0145706fbe, 0x243185be4ee4b28c, 0x550c7dc3d5ffb4e2,
	0x72be5d74f27b896f, 0x80deb1fe3b1696b1, 0x9bdc06a725c71235, 0xc19bf174cf692694,
	0xe49b69c19ef14ad2, 0xefbe4786384f25e3, 0x0fc19dc68b8cd5b5, 0x240ca1cc77ac9c65,
	0x2de92c6f592b0275, 0x4a7484aa6ea6e483, 0x5cb0a9dcbd41fbd4, 0x76f988da831153b5,
	0x983e5152ee66dfab, 0xa831c66d2db43210, 0xb00327c898fb213f, 0xbf597fc7beef0ee4,
	0xc6e00bf33da88fc2, 0xd5a79147930aa725, 0x06ca6351e003826f, 0x142929670a0e6e70,
	0x27b70a8546d22ffc, 0x2e1b21385c26c926, 0x4d2c6dfc5ac42aed, 0x53380d139d95b3df,
	0x650a73548baf63de, 0x766a0abb3c77b2a8, 0x81c2c92e47edaee6, 0x92722c851482353b,
	0xa2bfe8a14cf10364, 0xa81a664bbc423001, 0xc24b8b70d0f89791, 0xc76c51a30654be30,
	0xd192e819d6ef5218, 0xd69906245565a910, 0xf40e35855771202a, 0x106aa07032bbd1b8,
	0x19a4c116b8d2d0c8, 0x1e376c085141ab53, 0x2748774cdf8eeb99, 0x34b0bcb5e19b48a8,
	0x391c0cb3c5c95a63, 0x4ed8aa4ae3418acb, 0x5b9cca4f7763e373, 0x682e6ff3d6b2b8a3,
	0x748f82ee5defb2fc, 0x78a5636f43172f60, 0x84c87814a1f0ab72, 0x8cc702081a6439ec,
	0x90befffa23631e28, 0xa4506cebde82bde9, 0xbef9a3f7b2c67915, 0xc67178f2e372532b,
	0xca273eceea26619c, 0xd186b8c721c0c207, 0xeada7dd6cde0eb1e, 0xf57d4f7fee6ed178,
	0x06f067aa72176fba, 0x0a637dc5a2c898a6, 0x113f9804bef90dae, 0x1b710b35131c471b,
	0x28db77f523047d84, 0x32caab7b40c72493, 0x3c9ebe0a15c9bebc, 0x431d67c49c100d4c,
	0x4cc5d4becb3e42b6, 0x597f299cfc657e2a, 0x5fcb6fab3ad6faec, 0x6c44198c4a475817,
}

// NewSHA512 returns a hasher with nothing written yet.
func NewSHA512() *SHA512 { return &SHA512{h: sha512Init} }

// Write adds p to the hashed input.
func (d *SHA512) Write(p []byte) {
	d.length += uint64(len(p))
	if d.filled > 0 {
		n := copy(d.block[d.filled:], p)
		d.filled += n
		p = p[n:]
		if d.filled < len(d.block) {
			return
		}
		d.compress(d.block[:])
		d.filled = 0
	}
	for len(p) >= len(d.block) {
		d.compress(p[:len(d.block)])
		p = p[len(d.block):]
	}
	d.filled = copy(d.block[:], p)
}

// Sum returns the digest; the hasher must not be written to afterwards.
func (d *SHA512) Sum() [64]byte {
	bitLength := d.length << 3
	// Padding: 0x80, zeros up to 112 mod 128, then the 128-bit length (the high
	// 64 bits are zero for any input that fits in memory).
	var pad [128 + 16]byte
	pad[0] = 0x80
	n := 112 - d.filled
	if n <= 0 {
		n += 128
	}
	binary.BigEndian.PutUint64(pad[n+8:], bitLength)
	d.Write(pad[:n+16])
	var sum [64]byte
	for i, v := range d.h {
		binary.BigEndian.PutUint64(sum[8*i:], v)
	}
	return sum
}

func (d *SHA512) compress(block []byte) {
	var w [80]uint64
	for i := range 16 {
		w[i] = binary.BigEndian.Uint64(block[8*i:])
	}
	for i := 16; i < 80; i++ {
		s0 := bits.RotateLeft64(w[i-15], -1) ^ bits.RotateLeft64(w[i-15], -8) ^ (w[i-15] >> 7)
		s1 := bits.RotateLeft64(w[i-2], -19) ^ bits.RotateLeft64(w[i-2], -61) ^ (w[i-2] >> 6)
		w[i] = w[i-16] + s0 + w[i-7] + s1
	}
	a, b, c, e, f, g, h, dd := d.h[0], d.h[1], d.h[2], d.h[4], d.h[5], d.h[6], d.h[7], d.h[3]
	for i := range 80 {
		t1 := h + (bits.RotateLeft64(e, -14) ^ bits.RotateLeft64(e, -18) ^ bits.RotateLeft64(e, -41)) +
			((e & f) ^ (^e & g)) + sha512K[i] + w[i]
		t2 := (bits.RotateLeft64(a, -28) ^ bits.RotateLeft64(a, -34) ^ bits.RotateLeft64(a, -39)) +
			((a & b) ^ (a & c) ^ (b & c))
		h, g, f, e, dd, c, b, a = g, f, e, dd+t1, c, b, a, t1+t2
	}
	d.h[0] += a
	d.h[1] += b
	d.h[2] += c
	d.h[3] += dd
	d.h[4] += e
	d.h[5] += f
	d.h[6] += g
	d.h[7] += h
}
