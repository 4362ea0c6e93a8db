package testcluster

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"strings"
)

// identityLeaseHolder is the identity kube-apiserver mixes into its server ID hash.
const identityLeaseHolder = "kube-apiserver"

// ServerID returns the server ID (and identity lease name) that kube-apiserver derives from its
// host name: "apiserver-" followed by the lower-case, unpadded base32 encoding of the first 16
// bytes of SHA-256 over the host name and "kube-apiserver", each prefixed with its length as a
// big-endian uint16.
func ServerID(hostname string) string {
	data := make([]byte, 0, 4+len(hostname)+len(identityLeaseHolder))
	data = binary.BigEndian.AppendUint16(data, uint16(len(hostname)))
	data = append(data, hostname...)
	data = binary.BigEndian.AppendUint16(data, uint16(len(identityLeaseHolder)))
	data = append(data, identityLeaseHolder...)
	sum := sha256.Sum256(data)
	return "apiserver-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}
