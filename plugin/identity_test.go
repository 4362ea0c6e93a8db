package plugin

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"math/big"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
)

// testDigest is a connection.sha256_peer_certificate_digest as Envoy spells it.
const testDigest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestIdentityFromSubjectMapsLikeTheX509Authenticator(t *testing.T) {
	cases := []struct {
		subject string
		user    string
		uid     string
		groups  []string
		wantErr bool
	}{
		{subject: "CN=alice", user: "alice"},
		{subject: "CN=alice,O=dev,O=system:masters", user: "alice", groups: []string{"system:masters", "dev"}},
		{subject: `CN=smith\, john,OU=ops,O=acme\+co`, user: "smith, john", groups: []string{"acme+co"}},
		{subject: `CN=j\C3\BCrgen,O=t\C3\A9am`, user: "jürgen", groups: []string{"téam"}},
		{subject: "CN=node+UID=7,O=system:nodes", user: "node", groups: []string{"system:nodes"}},
		{subject: "CN=newest,CN=oldest", user: "newest"},
		{subject: "O=no-common-name", wantErr: true},
		{subject: "CN=", wantErr: true},
		{subject: `CN=a\`, wantErr: true},
		{subject: "garbage", wantErr: true},
		{subject: `CN=evil\0Aline`, wantErr: true},
		// Only what a request header carries unchanged is asserted: HTTP/1.1
		// trims leading and trailing spaces and tabs, and kube-apiserver's
		// request-header authenticator drops empty values.
		{subject: `CN=mallory,O=\ system:masters`, wantErr: true},
		{subject: `CN=lab-admin\ `, wantErr: true},
		{subject: `CN=\09lab-admin`, wantErr: true},
		{subject: `CN=jane,O=system:masters\09`, wantErr: true},
		{subject: `CN=jane,O=dev,O=`, wantErr: true},
		{subject: `CN=jane,O=\ `, wantErr: true},
		{subject: `CN=del\7F`, wantErr: true},
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=#0C03203131", wantErr: true},
		{subject: `CN=lab admin\09x,O=on call,O=a\2Cb`, user: "lab admin\tx", groups: []string{"a,b", "on call"}},
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=#0C03312031", user: "alice", uid: "1 1"},
		// The Kubernetes UID attribute, printed as its OID and '#' with the hex of its DER.
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=#0C0475696431,O=dev", user: "alice", uid: "uid1", groups: []string{"dev"}},
		{subject: "1.3.6.1.4.1.57683.2=#1303753D31+CN=alice", user: "alice", uid: "u=1"},
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=#0C0475696431,1.3.6.1.4.1.57683.2=#0C0475696432", wantErr: true},
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=#0C00", wantErr: true},
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=#0C036C660A", wantErr: true},
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=uid1", wantErr: true},
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=#0C047569", wantErr: true},
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=#0C0475696G31", wantErr: true},
		{subject: "CN=alice,1.3.6.1.4.1.57683.2=#020101", wantErr: true},
		// The same OID in a CN's text is no attribute.
		{subject: `CN=alice\,1.3.6.1.4.1.57683.2=#0C0475696431`, user: "alice,1.3.6.1.4.1.57683.2=#0C0475696431"},
	}
	for _, c := range cases {
		t.Run(c.subject, func(t *testing.T) {
			id, err := identityFromSubject(c.subject)
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v; want error %v", err, c.wantErr)
			}
			if err == nil && (id.User != c.user || id.UID != c.uid || !slices.Equal(id.Groups, c.groups)) {
				t.Errorf("got %+v; want user %q uid %q groups %q", id, c.user, c.uid, c.groups)
			}
		})
	}
}

func TestCredentialIDIsTheCertificateDigestAsTheX509AuthenticatorNamesIt(t *testing.T) {
	for _, c := range []struct {
		name, digest, want string
	}{
		{"Envoy's digest", testDigest, "X509SHA256=" + testDigest},
		{"absent", "", ""},
		{"upper case", strings.ToUpper(testDigest), ""},
		{"short", testDigest[:62], ""},
		{"not hex", testDigest[:63] + "g", ""},
		{"with colons", testDigest[:2] + ":" + testDigest[3:], ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, err := identityFromCertificate("CN=alice", c.digest)
			if c.want == "" {
				if err == nil {
					t.Fatalf("accepted digest %q: %+v", c.digest, id)
				}
				return
			}
			if err != nil || id.CredentialID != c.want {
				t.Errorf("credential id %q (%v); want %q", id.CredentialID, err, c.want)
			}
		})
	}
}

// The UID attribute's value decodes exactly as kube-apiserver's x509
// authenticator reads it from a certificate Go parses; a value Go cannot parse,
// or the authenticator refuses, is refused.
func TestUIDAttributeDecodesAsKubeAPIServerReadsIt(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	uidOID := asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57683, 2}
	str := func(tag int, content string) asn1.RawValue {
		return asn1.RawValue{Class: asn1.ClassUniversal, Tag: tag, Bytes: []byte(content)}
	}
	for _, c := range []struct {
		name  string
		value asn1.RawValue
	}{
		{"UTF8String", str(asn1.TagUTF8String, "3f1c-uid")},
		{"UTF8String beyond ASCII", str(asn1.TagUTF8String, "jürgen-ü")},
		{"UTF8String invalid", str(asn1.TagUTF8String, "a\xffb")},
		{"UTF8String empty", str(asn1.TagUTF8String, "")},
		{"UTF8String of 200 bytes", str(asn1.TagUTF8String, strings.Repeat("u", 200))},
		{"UTF8String of 300 bytes", str(asn1.TagUTF8String, strings.Repeat("u", 300))},
		{"PrintableString", str(asn1.TagPrintableString, "uid 1 (a+b=c?)")},
		{"PrintableString with Go's tolerated * and &", str(asn1.TagPrintableString, "a*&b")},
		{"PrintableString with @", str(asn1.TagPrintableString, "a@b")},
		{"IA5String", str(asn1.TagIA5String, "a@b~")},
		{"IA5String beyond ASCII", str(asn1.TagIA5String, "a\x80")},
		{"NumericString", str(asn1.TagNumericString, "12 34")},
		{"NumericString with a letter", str(asn1.TagNumericString, "12a")},
		{"T61String as Latin-1", str(asn1.TagT61String, "caf\xe9")},
		{"BMPString", str(asn1.TagBMPString, "\x00j\x00\xfc")},
		{"BMPString with terminator", str(asn1.TagBMPString, "\x00a\x00\x00")},
		{"BMPString surrogate", str(asn1.TagBMPString, "\xd8\x00")},
		{"BMPString noncharacter", str(asn1.TagBMPString, "\xff\xfe")},
		{"BMPString odd length", str(asn1.TagBMPString, "\x00a\x00")},
		{"UniversalString", str(28, "\x00\x00\x00a")},
		{"VisibleString", str(26, "abc")},
		{"INTEGER", asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagInteger, Bytes: []byte{1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			value, err := asn1.Marshal(c.value)
			if err != nil {
				t.Fatal(err)
			}
			tmpl := &x509.Certificate{
				SerialNumber: big.NewInt(1),
				Subject: pkix.Name{CommonName: "alice", ExtraNames: []pkix.AttributeTypeAndValue{
					{Type: uidOID, Value: asn1.RawValue{FullBytes: value}},
				}},
			}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
			if err != nil {
				t.Fatal(err)
			}
			var wantUID string
			wantOK := false
			if cert, err := x509.ParseCertificate(der); err == nil {
				resp, ok, err := x509request.CommonNameUserConversion.User([]*x509.Certificate{cert})
				if err == nil && ok {
					wantUID, wantOK = resp.User.GetUID(), true
				}
			}
			// Envoy dumps the attribute OpenSSL has no name for as '#' and upper-case hex.
			id, err := identityFromSubject("1.3.6.1.4.1.57683.2=#" + strings.ToUpper(hex.EncodeToString(value)) + ",CN=alice")
			if wantOK && (err != nil || id.UID != wantUID) {
				t.Errorf("UID %q (%v); kube-apiserver reads %q", id.UID, err, wantUID)
			}
			if !wantOK && err == nil {
				t.Errorf("UID %q; kube-apiserver refuses the certificate", id.UID)
			}
		})
	}
}

// FuzzIdentityFromSubject: what is accepted is asserted unchanged. The user,
// UID and groups, written by Go's HTTP/1.1 header writer and read by its
// parser (the hop that trims whitespace; a value that survives it is a valid
// HTTP/2 field value too), are what kube-apiserver's request-header
// authenticator reads back.
func FuzzIdentityFromSubject(f *testing.F) {
	for _, s := range []string{"CN=alice,O=dev", `CN=a\2C b`, `CN=\`, "O=x+CN=y", "CN=a,1.3.6.1.4.1.57683.2=#1E0400FC0041",
		`CN=mallory,O=\ system:masters`, `CN=lab-admin\ `, `CN=a\09b,O=`, "CN=a,1.3.6.1.4.1.57683.2=#0C022031"} {
		f.Add(s)
	}
	fromHeaders, err := headerrequest.New([]string{"X-Remote-User"}, []string{"X-Remote-Uid"}, []string{"X-Remote-Group"}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		id, err := identityFromSubject(subject)
		if err != nil {
			return
		}
		if id.User == "" {
			t.Fatal("accepted a subject without a user")
		}
		if !utf8.ValidString(id.UID) {
			t.Fatalf("accepted UID %q, which is no string kube-apiserver reads", id.UID)
		}
		sent := http.Header{"X-Remote-User": {id.User}, "X-Remote-Group": id.Groups}
		if id.UID != "" {
			sent["X-Remote-Uid"] = []string{id.UID}
		}
		var wire bytes.Buffer
		if err := sent.Write(&wire); err != nil {
			t.Fatal(err)
		}
		wire.WriteString("\r\n")
		received, err := textproto.NewReader(bufio.NewReader(&wire)).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("accepted %q, whose headers Go's HTTP/1.1 parser refuses: %v", sent, err)
		}
		got, ok, err := fromHeaders.AuthenticateRequest(&http.Request{Header: http.Header(received)})
		if err != nil || !ok {
			t.Fatalf("accepted %q, whose headers authenticate nobody: %v", sent, err)
		}
		if u := got.User; u.GetName() != id.User || u.GetUID() != id.UID || !slices.Equal(u.GetGroups(), id.Groups) {
			t.Fatalf("accepted user %q uid %q groups %q, which the API server reads as user %q uid %q groups %q",
				id.User, id.UID, id.Groups, u.GetName(), u.GetUID(), u.GetGroups())
		}
	})
}
