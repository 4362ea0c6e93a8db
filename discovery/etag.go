package discovery

const upperHex = "0123456789ABCDEF"

// ETag is the entity tag kube-apiserver sends for the list, quotes included:
// the SHA-512 of the list's encoding without kind and apiVersion (upstream
// hashes a list whose TypeMeta is still empty), in uppercase hex. The same tag
// covers every media type of the document. Upstream compares If-None-Match
// with it byte for byte.
func ETag(l GroupList) string {
	// Hashing the encoding as it is written keeps the buffer at a few groups'
	// size instead of growing it to the whole document.
	const flushAt = 4 << 10
	h := NewSHA512()
	buf := l.appendJSON(make([]byte, 0, 2*flushAt), false, func(b []byte) []byte {
		if len(b) < flushAt {
			return b
		}
		h.Write(b)
		return b[:0]
	})
	h.Write(buf)
	return quotedHex(h.Sum())
}

// quotedHex is a SHA-512 sum as kube-apiserver writes entity tags: uppercase
// hex in double quotes.
func quotedHex(sum [64]byte) string {
	var tag [2*len(sum) + 2]byte
	tag[0] = '"'
	for i, b := range sum {
		tag[1+2*i] = upperHex[b>>4]
		tag[2+2*i] = upperHex[b&0xF]
	}
	tag[len(tag)-1] = '"'
	return string(tag[:])
}
