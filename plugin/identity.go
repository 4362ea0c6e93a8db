package plugin

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// certIdentity is what kube-apiserver's x509 authenticator derives from a client
// certificate: the user is the subject's common name, the UID its Kubernetes
// UID attribute, the groups its organizations, and the credential id names the
// certificate by its SHA-256 digest.
type certIdentity struct {
	User         string
	UID          string
	Groups       []string
	CredentialID string
}

// oidKubernetesUID is the subject attribute kube-apiserver takes the user's UID
// from (AllowParsingUserUIDFromCertAuth, on by default since 1.33). OpenSSL has
// no name for it, so Envoy prints it as its dotted OID with the value as '#'
// and the hex of its DER.
const oidKubernetesUID = "1.3.6.1.4.1.57683.2"

var errUndecodableUID = errors.New("client certificate UID attribute is not a string kube-apiserver can read")

// identityFromCertificate is the identity of a verified client certificate
// given its subject (connection.subject_peer_certificate) and digest
// (connection.sha256_peer_certificate_digest).
func identityFromCertificate(subject, digest string) (certIdentity, error) {
	id, err := identityFromSubject(subject)
	if err != nil {
		return certIdentity{}, err
	}
	// Envoy spells the digest as kube-apiserver spells the credential id: 64
	// lower-case hex digits.
	if len(digest) != 64 || strings.Trim(digest, "0123456789abcdef") != "" {
		return certIdentity{}, errors.New("client certificate has no SHA-256 digest (connection.sha256_peer_certificate_digest)")
	}
	id.CredentialID = "X509SHA256=" + digest
	return id, nil
}

// identityFromSubject parses the RFC 2253 subject string Envoy exposes as the
// connection.subject_peer_certificate property (OpenSSL XN_FLAG_RFC2253: most
// specific RDN first, ',' between RDNs, '+' inside multi-valued RDNs, '\'
// escapes and \XX hex escapes for bytes outside printable ASCII).
func identityFromSubject(subject string) (certIdentity, error) {
	var id certIdentity
	var haveCN, haveUID bool
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
		case oidKubernetesUID:
			// kube-apiserver refuses a certificate with several or an empty one.
			if haveUID {
				return certIdentity{}, errors.New("client certificate has several UID attributes")
			}
			if id.UID, err = derString(value); err != nil {
				return certIdentity{}, err
			}
			if id.UID == "" {
				return certIdentity{}, errors.New("client certificate UID attribute is empty")
			}
			haveUID = true
		}
	}
	if id.User == "" {
		return certIdentity{}, errors.New("client certificate subject has no common name")
	}
	// Restore certificate order, which is the order kube-apiserver reports groups in.
	slices.Reverse(id.Groups)
	if !carriedUnchanged(id.User) || (haveUID && !carriedUnchanged(id.UID)) || slices.ContainsFunc(id.Groups, notCarriedUnchanged) {
		return certIdentity{}, errNotCarriedUnchanged
	}
	return id, nil
}

var errNotCarriedUnchanged = errors.New("client certificate subject has a common name, organization or UID that is empty, " +
	"begins or ends with a space or tab, or contains control characters: no request header carries it unchanged")

// carriedUnchanged reports whether v, asserted in a request header, reaches
// kube-apiserver's request-header authenticator byte for byte over HTTP/1.1
// and HTTP/2 alike: whether it is one RFC 9110 field-content (a visible or
// non-ASCII byte first and last, spaces and tabs only between). An HTTP/1.1
// parser drops leading and trailing spaces and tabs, as RFC 9110 asks (Go's
// writer trims them before sending), RFC 9113 forbids them in HTTP/2, the
// authenticator ignores an empty value, and other control characters are
// refused or rewritten on the way.
func carriedUnchanged(v string) bool {
	if v == "" || isSpaceOrTab(v[0]) || isSpaceOrTab(v[len(v)-1]) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func notCarriedUnchanged(v string) bool { return !carriedUnchanged(v) }

func isSpaceOrTab(c byte) bool { return c == ' ' || c == '\t' }

// derString decodes an attribute value OpenSSL dumped as '#' and hex DER the
// way Go's crypto/x509, which kube-apiserver reads certificates with, decodes
// subject strings (parseASN1String); a value it cannot decode makes it reject
// the certificate.
func derString(dump string) (string, error) {
	hexDER, ok := strings.CutPrefix(dump, "#")
	if !ok || len(hexDER) < 4 || len(hexDER)%2 != 0 {
		return "", errUndecodableUID
	}
	der := make([]byte, len(hexDER)/2)
	for i := range der {
		v, err := strconv.ParseUint(hexDER[2*i:2*i+2], 16, 8)
		if err != nil {
			return "", errUndecodableUID
		}
		der[i] = byte(v)
	}
	// One tag byte, then a definite length in DER's shortest form.
	tag, n, b := der[0], int(der[1]), der[2:]
	switch {
	case n < 0x80:
	case n == 0x81 && len(b) > 0 && b[0] >= 0x80:
		n, b = int(b[0]), b[1:]
	case n == 0x82 && len(b) > 1 && b[0] != 0:
		n, b = int(b[0])<<8|int(b[1]), b[2:]
	default:
		return "", errUndecodableUID
	}
	if n != len(b) {
		return "", errUndecodableUID
	}
	text := string(b)
	switch tag {
	case 0x0c: // UTF8String
		ok = utf8.ValidString(text)
	case 0x12: // NumericString
		ok = strings.Trim(text, "0123456789 ") == ""
	case 0x13: // PrintableString, with the '*' and '&' Go tolerates
		ok = strings.Trim(text, printableString) == ""
	case 0x16: // IA5String
		for i := 0; i < len(text); i++ {
			ok = ok && text[i] < 0x80
		}
	case 0x14, 0x1e:
		// T61String is read as Latin-1, BMPString as UCS-2 without surrogates
		// or noncharacters and with its terminator dropped.
		width := 1
		if tag == 0x1e {
			width, ok = 2, len(b)%2 == 0
			if l := len(b); ok && l >= 2 && b[l-1] == 0 && b[l-2] == 0 {
				b = b[:l-2]
			}
		}
		var out strings.Builder
		for i := 0; ok && i < len(b); i += width {
			r := rune(b[i])
			if width == 2 {
				r = r<<8 | rune(b[i+1])
				ok = r < 0xd800 || r > 0xdfff && (r < 0xfdd0 || r > 0xfdef) && r < 0xfffe
			}
			out.WriteRune(r)
		}
		text = out.String()
	default:
		ok = false
	}
	if !ok {
		return "", errUndecodableUID
	}
	return text, nil
}

const printableString = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 '()+,-./:=?*&"

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
