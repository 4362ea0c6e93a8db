package gateway

import (
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// attributeShortNames are OpenSSL's short names for the attribute types that
// appear in certificate subjects.
var attributeShortNames = map[string]string{
	"2.5.4.3":                    "CN",
	"2.5.4.4":                    "SN",
	"2.5.4.5":                    "serialNumber",
	"2.5.4.6":                    "C",
	"2.5.4.7":                    "L",
	"2.5.4.8":                    "ST",
	"2.5.4.9":                    "street",
	"2.5.4.10":                   "O",
	"2.5.4.11":                   "OU",
	"2.5.4.12":                   "title",
	"2.5.4.13":                   "description",
	"2.5.4.15":                   "businessCategory",
	"2.5.4.17":                   "postalCode",
	"2.5.4.41":                   "name",
	"2.5.4.42":                   "GN",
	"2.5.4.43":                   "initials",
	"2.5.4.44":                   "generationQualifier",
	"2.5.4.46":                   "dnQualifier",
	"2.5.4.65":                   "pseudonym",
	"2.5.4.97":                   "organizationIdentifier",
	"0.9.2342.19200300.100.1.1":  "UID",
	"0.9.2342.19200300.100.1.25": "DC",
	"1.2.840.113549.1.9.1":       "emailAddress",
	"1.3.6.1.4.1.311.60.2.1.1":   "jurisdictionL",
	"1.3.6.1.4.1.311.60.2.1.2":   "jurisdictionST",
	"1.3.6.1.4.1.311.60.2.1.3":   "jurisdictionC",
}

// ASN.1 string tags OpenSSL prints as text; every other value is dumped.
const (
	tagUTF8String      = 12
	tagNumericString   = 18
	tagPrintableString = 19
	tagT61String       = 20
	tagIA5String       = 22
	tagVisibleString   = 26
	tagUniversalString = 28
	tagBMPString       = 30
)

type attributeTypeAndValue struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue
}

// relativeNameSET is one RDN; the SET suffix makes encoding/asn1 parse a SET OF.
type relativeNameSET []attributeTypeAndValue

// subjectRFC2253 renders a DER-encoded X.509 Name the way Envoy exposes the
// connection.subject_peer_certificate attribute: OpenSSL's X509_NAME_print_ex
// with XN_FLAG_RFC2253. The most specific RDN comes first, ',' separates RDNs
// and '+' the members of one; types use OpenSSL's short names (unknown ones
// their dotted OID, with the value dumped as '#' and hex DER); values are
// converted to UTF-8, and ",+\"\\<>;" (plus a leading '#' or space and a
// trailing space) are escaped with a backslash, control characters and every
// byte above 0x7f as \XX.
func subjectRFC2253(rawSubject []byte) (string, error) {
	var rdns []relativeNameSET
	rest, err := asn1.Unmarshal(rawSubject, &rdns)
	if err != nil {
		return "", err
	}
	if len(rest) != 0 {
		return "", errors.New("trailing data after the subject name")
	}
	var b strings.Builder
	for i := len(rdns) - 1; i >= 0; i-- {
		rdn := rdns[i]
		for j := len(rdn) - 1; j >= 0; j-- {
			switch {
			case j < len(rdn)-1:
				b.WriteByte('+')
			case i < len(rdns)-1:
				b.WriteByte(',')
			}
			writeAttribute(&b, rdn[j])
		}
	}
	return b.String(), nil
}

func writeAttribute(b *strings.Builder, atv attributeTypeAndValue) {
	oid := atv.Type.String()
	name, known := attributeShortNames[oid]
	if !known {
		b.WriteString(oid)
		b.WriteByte('=')
		dumpDER(b, atv.Value)
		return
	}
	b.WriteString(name)
	b.WriteByte('=')
	text, ok := decodeString(atv.Value)
	if !ok {
		dumpDER(b, atv.Value)
		return
	}
	escapeValue(b, text)
}

func dumpDER(b *strings.Builder, v asn1.RawValue) {
	b.WriteByte('#')
	b.WriteString(strings.ToUpper(hex.EncodeToString(v.FullBytes)))
}

// decodeString converts a string-typed value to UTF-8 as OpenSSL's
// ASN1_STRFLGS_UTF8_CONVERT does.
func decodeString(v asn1.RawValue) (string, bool) {
	if v.Class != asn1.ClassUniversal || v.IsCompound {
		return "", false
	}
	switch v.Tag {
	case tagUTF8String, tagNumericString, tagPrintableString, tagIA5String, tagVisibleString:
		return string(v.Bytes), true
	case tagT61String:
		// OpenSSL reads T61String as Latin-1.
		runes := make([]rune, len(v.Bytes))
		for i, c := range v.Bytes {
			runes[i] = rune(c)
		}
		return string(runes), true
	case tagBMPString:
		if len(v.Bytes)%2 != 0 {
			return "", false
		}
		units := make([]uint16, len(v.Bytes)/2)
		for i := range units {
			units[i] = binary.BigEndian.Uint16(v.Bytes[2*i:])
		}
		return string(utf16.Decode(units)), true
	case tagUniversalString:
		if len(v.Bytes)%4 != 0 {
			return "", false
		}
		runes := make([]rune, len(v.Bytes)/4)
		for i := range runes {
			runes[i] = rune(binary.BigEndian.Uint32(v.Bytes[4*i:]))
		}
		return string(runes), true
	}
	return "", false
}

func escapeValue(b *strings.Builder, s string) {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if size > 1 || r == utf8.RuneError {
			for _, c := range []byte(s[i : i+size]) {
				b.WriteByte('\\')
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			}
			i += size
			continue
		}
		c := s[i]
		first, last := i == 0, i == len(s)-1
		switch {
		case c < 0x20 || c == 0x7f:
			b.WriteByte('\\')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		case strings.IndexByte(",+\"\\<>;", c) >= 0, c == '#' && first, c == ' ' && (first || last):
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
		i++
	}
}
