package wasmhost

import (
	"encoding/binary"
	"errors"
)

// Limits cpp-host applies when it deserialises a guest-supplied map (PROXY_WASM_HOST_PAIRS_MAX_BYTES and
// PROXY_WASM_HOST_PAIRS_MAX_COUNT).
const (
	maxPairsBytes = 1 << 20
	maxPairsCount = 1024
)

var (
	errPairsTooLarge  = errors.New("serialized map exceeds 1 MiB")
	errPairsTooMany   = errors.New("serialized map exceeds 1024 pairs")
	errPairsTruncated = errors.New("serialized map is truncated")
	errPairsNoNUL     = errors.New("serialized map entry is not NUL-terminated")
)

// appendPairs appends the proxy-wasm encoding of pairs (little-endian) to dst.
func appendPairs(dst []byte, pairs [][2]string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(pairs)))
	for _, p := range pairs {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p[1])))
	}
	for _, p := range pairs {
		dst = append(dst, p[0]...)
		dst = append(dst, 0)
		dst = append(dst, p[1]...)
		dst = append(dst, 0)
	}
	return dst
}

// decodePairs parses a guest-supplied map with cpp-host's limits. Inputs shorter than the count field decode to
// an empty map, as the spec allows an empty map to be sent as zero bytes or a single NUL. The returned strings
// are copies, so the result stays valid after guest memory changes.
func decodePairs(b []byte) ([][2]string, error) {
	if len(b) > maxPairsBytes {
		return nil, errPairsTooLarge
	}
	if len(b) < 4 {
		return nil, nil
	}
	count := uint64(binary.LittleEndian.Uint32(b))
	if count > maxPairsCount {
		return nil, errPairsTooMany
	}
	sizes := b[4:]
	if uint64(len(sizes)) < count*8 {
		return nil, errPairsTruncated
	}
	data := sizes[count*8:]
	pairs := make([][2]string, count)
	for i := range pairs {
		for j := range 2 {
			n := uint64(binary.LittleEndian.Uint32(sizes[i*8+j*4:]))
			if uint64(len(data)) < n+1 {
				return nil, errPairsTruncated
			}
			if data[n] != 0 {
				return nil, errPairsNoNUL
			}
			pairs[i][j] = string(data[:n])
			data = data[n+1:]
		}
	}
	return pairs, nil
}
