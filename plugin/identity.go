package main

import (
	"errors"
	"slices"
	"strconv"
	"strings"
)

// certIdentity is what kube-apiserver's x509 authenticator derives from a client
// certificate: the user is the subject's common name, the groups are its
// organizations.
type certIdentity struct {
	User   string
	Groups []string
}

// identityFromSubject parses the RFC 2253 subject string Envoy exposes as the
// connection.subject_peer_certificate property (OpenSSL XN_FLAG_RFC2253: most
// specific RDN first, ',' between RDNs, '+' inside multi-valued RDNs, '\'
// escapes and \XX hex escapes for bytes outside printable ASCII).
func identityFromSubject(subject string) (certIdentity, error) {
	var id certIdentity
	var haveCN bool
	for len(subject) > 0 {
		attr, value, rest, err := nextAttribute(subject)
		if err != nil {
			return certIdentity{}, err
		}
		subject = rest
		switch attr {
		case "CN":
			// Printed order is the reverse of the certificate's; Go's pkix.Name
			// (which kube-apiserver uses) keeps the last CN of the certificate,
			// which is the first one printed.
			if !haveCN {
				id.User, haveCN = value, true
			}
		case "O":
			id.Groups = append(id.Groups, value)
		}
	}
	if id.User == "" {
		return certIdentity{}, errors.New("client certificate subject has no common name")
	}
	// Restore certificate order, which is the order kube-apiserver reports groups in.
	slices.Reverse(id.Groups)
	for _, v := range append([]string{id.User}, id.Groups...) {
		if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return certIdentity{}, errors.New("client certificate subject contains control characters")
		}
	}
	return id, nil
}

// nextAttribute splits off one "TYPE=value" and its separator.
func nextAttribute(s string) (attr, value, rest string, err error) {
	eq := strings.IndexByte(s, '=')
	if eq <= 0 {
		return "", "", "", errors.New("malformed certificate subject: attribute without '='")
	}
	attr = strings.TrimSpace(s[:eq])
	var b strings.Builder
	i := eq + 1
	for ; i < len(s); i++ {
		c := s[i]
		if c == ',' || c == '+' {
			i++
			break
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			return "", "", "", errors.New("malformed certificate subject: dangling escape")
		}
		if i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i+1])
		i++
	}
	return attr, b.String(), s[min(i, len(s)):], nil
}
