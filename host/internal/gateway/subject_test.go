package gateway

import (
	"encoding/asn1"
	"encoding/hex"
	"strings"
	"testing"
)

// rawSubject encodes a Name whose attribute values carry explicit ASN.1
// string types, in the order given (least specific first, as in certificates).
func rawSubject(t *testing.T, rdns ...[]attributeTypeAndValue) []byte {
	t.Helper()
	seq := make([]relativeNameSET, len(rdns))
	for i, rdn := range rdns {
		seq[i] = rdn
	}
	raw, err := asn1.Marshal(seq)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func atv(oid asn1.ObjectIdentifier, tag int, content []byte) attributeTypeAndValue {
	return attributeTypeAndValue{Type: oid, Value: asn1.RawValue{Class: asn1.ClassUniversal, Tag: tag, Bytes: content}}
}

var (
	oidCN           = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidO            = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidOU           = asn1.ObjectIdentifier{2, 5, 4, 11}
	oidC            = asn1.ObjectIdentifier{2, 5, 4, 6}
	oidL            = asn1.ObjectIdentifier{2, 5, 4, 7}
	oidEmailAddress = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}
)

// The expected strings are what OpenSSL 3.0 prints for the same certificates
// with `openssl x509 -noout -subject -nameopt RFC2253`.
func TestSubjectIsPrintedAsOpenSSLPrintsRFC2253(t *testing.T) {
	utf8 := func(s string) []byte { return []byte(s) }
	for _, tc := range []struct {
		name    string
		subject []byte
		want    string
	}{
		{"most specific first, multi-valued RDN reversed, specials escaped",
			rawSubject(t,
				[]attributeTypeAndValue{atv(oidO, asn1.TagUTF8String, utf8("dev#ops")), atv(oidO, asn1.TagUTF8String, utf8("on call"))},
				[]attributeTypeAndValue{atv(oidCN, asn1.TagUTF8String, utf8(`jane, "doe"+admin`))}),
			`CN=jane\, \"doe\"\+admin,O=on call+O=dev#ops`},
		{"leading hash and spaces, every RFC 2253 special",
			rawSubject(t,
				[]attributeTypeAndValue{atv(oidO, asn1.TagUTF8String, utf8("#hash")), atv(oidO, asn1.TagUTF8String, utf8(`a;b<c>d\e`))},
				[]attributeTypeAndValue{atv(oidOU, asn1.TagUTF8String, utf8("x=y"))},
				[]attributeTypeAndValue{atv(oidCN, asn1.TagUTF8String, utf8(" lead#trail "))}),
			`CN=\ lead#trail\ ,OU=x=y,O=a\;b\<c\>d\\e+O=\#hash`},
		{"bytes above 0x7f as hex escapes",
			rawSubject(t,
				[]attributeTypeAndValue{atv(oidC, asn1.TagPrintableString, utf8("DE"))},
				[]attributeTypeAndValue{atv(oidL, asn1.TagUTF8String, utf8("Köln"))},
				[]attributeTypeAndValue{atv(oidCN, asn1.TagUTF8String, utf8("Zoë 日本"))}),
			`CN=Zo\C3\AB \E6\97\A5\E6\9C\AC,L=K\C3\B6ln,C=DE`},
		{"control characters escaped, unknown types dumped as DER",
			rawSubject(t,
				[]attributeTypeAndValue{atv(oidCN, asn1.TagUTF8String, utf8("ctl\x01\x7f"))},
				[]attributeTypeAndValue{atv(asn1.ObjectIdentifier{1, 2, 3, 4}, asn1.TagPrintableString, utf8("custom"))},
				[]attributeTypeAndValue{atv(oidEmailAddress, asn1.TagIA5String, utf8("a@b.c"))}),
			`emailAddress=a@b.c,1.2.3.4=#1306637573746F6D,CN=ctl\01\7F`},
		{"BMPString and T61String converted to UTF-8",
			rawSubject(t,
				[]attributeTypeAndValue{atv(oidO, tagT61String, []byte{'C', 0xe9})},
				[]attributeTypeAndValue{atv(oidCN, tagBMPString, []byte{0x03, 0xa9, 0x00, 'k'})}),
			`CN=\CE\A9k,O=C\C3\A9`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := subjectRFC2253(tc.subject)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestMalformedSubjectIsAnError(t *testing.T) {
	for _, raw := range [][]byte{{0x30, 0x05, 0x31}, append(rawSubject(t, []attributeTypeAndValue{atv(oidCN, asn1.TagUTF8String, []byte("x"))}), 0)} {
		if got, err := subjectRFC2253(raw); err == nil {
			t.Errorf("subjectRFC2253(%x) = %q, want an error", raw, got)
		}
	}
}

// unescapeRFC2253Value reverses escapeValue for one attribute value.
func unescapeRFC2253Value(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b = append(b, s[i])
			continue
		}
		if i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			v, _ := hex.DecodeString(s[i+1 : i+3])
			b = append(b, v[0])
			i += 2
			continue
		}
		b = append(b, s[i+1])
		i++
	}
	return string(b)
}

func isHex(c byte) bool { return strings.IndexByte("0123456789ABCDEFabcdef", c) >= 0 }

// FuzzSubjectRFC2253 checks that any DER is handled without panicking and
// that a common name survives escaping: splitting the printed subject at
// unescaped separators and unescaping gives the value back.
func FuzzSubjectRFC2253(f *testing.F) {
	f.Add("jane", []byte{0x30, 0x03, 0x31, 0x01, 0x00})
	f.Add(`a,b+c"d\e<f>g;h #x `, []byte{})
	f.Add("\x00\x1f\x7fé", []byte{0x30, 0x80})
	f.Fuzz(func(t *testing.T, commonName string, der []byte) {
		_, _ = subjectRFC2253(der)
		raw, err := asn1.Marshal([]relativeNameSET{{atv(oidCN, asn1.TagUTF8String, []byte(commonName))}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := subjectRFC2253(raw)
		if err != nil {
			t.Fatal(err)
		}
		value, ok := strings.CutPrefix(got, "CN=")
		if !ok {
			t.Fatalf("%q does not start with CN=", got)
		}
		for i := 0; i < len(value); i++ {
			switch value[i] {
			case '\\':
				i++
			case ',', '+':
				t.Fatalf("unescaped separator in %q", got)
			}
		}
		if back := unescapeRFC2253Value(value); back != commonName {
			t.Fatalf("%q printed as %q reads back as %q", commonName, got, back)
		}
	})
}
