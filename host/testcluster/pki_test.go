package testcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPKIChainsEveryLeafToItsOwnCAForItsPurpose(t *testing.T) {
	p, err := newPKI(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for _, tc := range []struct {
		name    string
		leaf    tls.Certificate
		roots   *x509.CertPool
		usage   x509.ExtKeyUsage
		dnsName string
		ok      bool
	}{
		{"serving as kubernetes.default.svc", p.Serving, p.CAPool(), x509.ExtKeyUsageServerAuth, ServingServerName, true},
		{"serving as 127.0.0.1", p.Serving, p.CAPool(), x509.ExtKeyUsageServerAuth, "127.0.0.1", true},
		{"serving as localhost", p.Serving, p.CAPool(), x509.ExtKeyUsageServerAuth, "localhost", true},
		{"serving as kubernetes.default", p.Serving, p.CAPool(), x509.ExtKeyUsageServerAuth, "kubernetes.default", true},
		{"serving as kubernetes", p.Serving, p.CAPool(), x509.ExtKeyUsageServerAuth, "kubernetes", true},
		{"serving as an unlisted name", p.Serving, p.CAPool(), x509.ExtKeyUsageServerAuth, "example.com", false},
		{"serving under the front-proxy CA", p.Serving, p.FrontProxyCAPool(), x509.ExtKeyUsageServerAuth, ServingServerName, false},
		{"serving as a client", p.Serving, p.CAPool(), x509.ExtKeyUsageClientAuth, "", false},
		{"admin as a client", p.Admin, p.CAPool(), x509.ExtKeyUsageClientAuth, "", true},
		{"admin under the front-proxy CA", p.Admin, p.FrontProxyCAPool(), x509.ExtKeyUsageClientAuth, "", false},
		{"admin as a server", p.Admin, p.CAPool(), x509.ExtKeyUsageServerAuth, "", false},
		{"front-proxy client under the front-proxy CA", p.FrontProxyClient, p.FrontProxyCAPool(), x509.ExtKeyUsageClientAuth, "", true},
		{"front-proxy client under the cluster CA", p.FrontProxyClient, p.CAPool(), x509.ExtKeyUsageClientAuth, "", false},
		{"kubelet client under the cluster CA", p.KubeletClient, p.CAPool(), x509.ExtKeyUsageClientAuth, "", true},
		{"kubelet client as a server", p.KubeletClient, p.CAPool(), x509.ExtKeyUsageServerAuth, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.leaf.Leaf.Verify(x509.VerifyOptions{
				Roots:       tc.roots,
				DNSName:     tc.dnsName,
				KeyUsages:   []x509.ExtKeyUsage{tc.usage},
				CurrentTime: at,
			})
			if (err == nil) != tc.ok {
				t.Errorf("Verify = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestPKISubjectsCarryTheIdentitiesServersTrust(t *testing.T) {
	p, err := newPKI(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Admin.Leaf.Subject; got.CommonName != AdminUser || !slices.Equal(got.Organization, []string{"system:masters"}) {
		t.Errorf("admin subject = %v, want CN=%s O=system:masters", got, AdminUser)
	}
	if got := p.FrontProxyClient.Leaf.Subject.CommonName; got != FrontProxyClientName {
		t.Errorf("front-proxy client CN = %q, want %q", got, FrontProxyClientName)
	}
	if got := p.KubeletClient.Leaf.Subject.CommonName; got != KubeletClientName {
		t.Errorf("kubelet client CN = %q, want %q", got, KubeletClientName)
	}
	if !slices.ContainsFunc(p.Serving.Leaf.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
		t.Errorf("serving IP SANs = %v, want 127.0.0.1", p.Serving.Leaf.IPAddresses)
	}
	for name, cert := range map[string]*x509.Certificate{
		"ca": p.CA, "front-proxy ca": p.FrontProxyCA, "serving": p.Serving.Leaf, "admin": p.Admin.Leaf, "front-proxy client": p.FrontProxyClient.Leaf,
		"kubelet client": p.KubeletClient.Leaf,
	} {
		key, ok := cert.PublicKey.(*ecdsa.PublicKey)
		if !ok || key.Curve != elliptic.P256() {
			t.Errorf("%s key is %T, want ECDSA P-256", name, cert.PublicKey)
		}
	}
	if p.CA.Equal(p.FrontProxyCA) {
		t.Error("front-proxy CA is the cluster CA")
	}
}

func TestPKIWithOneCASignsTheFrontProxyClientWithTheClusterCA(t *testing.T) {
	p, err := newPKI(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !p.FrontProxyCA.Equal(p.CA) {
		t.Error("front-proxy CA is not the cluster CA")
	}
	if p.Files.FrontProxyCACert != p.Files.CACert {
		t.Errorf("front-proxy CA file %s, want the cluster CA file %s", p.Files.FrontProxyCACert, p.Files.CACert)
	}
	// The front-proxy client certificate is then a client certificate like any other.
	if _, err := p.FrontProxyClient.Leaf.Verify(x509.VerifyOptions{
		Roots:     p.CAPool(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		t.Errorf("front-proxy client under the cluster CA: %v", err)
	}
	if got := p.FrontProxyClient.Leaf.Subject.CommonName; got != FrontProxyClientName {
		t.Errorf("front-proxy client CN = %q, want %q", got, FrontProxyClientName)
	}
	if got := p.KubeletClient.Leaf.Subject.CommonName; got != KubeletClientName {
		t.Errorf("kubelet client CN = %q, want %q", got, KubeletClientName)
	}
}

func TestPKIKeyUsagesAndNamesMatchEachCertificatesRole(t *testing.T) {
	p, err := newPKI(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	const caUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	for _, tc := range []struct {
		name  string
		cert  *x509.Certificate
		isCA  bool
		usage x509.KeyUsage
		ext   []x509.ExtKeyUsage
	}{
		{"cluster CA", p.CA, true, caUsage, nil},
		{"front-proxy CA", p.FrontProxyCA, true, caUsage, nil},
		{"serving", p.Serving.Leaf, false, x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{"admin", p.Admin.Leaf, false, x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{"front-proxy client", p.FrontProxyClient.Leaf, false, x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{"kubelet client", p.KubeletClient.Leaf, false, x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cert.IsCA != tc.isCA || !tc.cert.BasicConstraintsValid && tc.isCA {
				t.Errorf("IsCA = %v (basic constraints valid: %v), want %v", tc.cert.IsCA, tc.cert.BasicConstraintsValid, tc.isCA)
			}
			if tc.cert.KeyUsage != tc.usage {
				t.Errorf("key usage = %b, want %b", tc.cert.KeyUsage, tc.usage)
			}
			if !slices.Equal(tc.cert.ExtKeyUsage, tc.ext) {
				t.Errorf("extended key usage = %v, want %v", tc.cert.ExtKeyUsage, tc.ext)
			}
		})
	}
	if !slices.Equal(p.Serving.Leaf.DNSNames, []string{"localhost", "kubernetes", "kubernetes.default", ServingServerName}) {
		t.Errorf("serving DNS SANs = %v", p.Serving.Leaf.DNSNames)
	}
}

func TestPKIFilesAreReadableByTheServersAndPrivate(t *testing.T) {
	p, err := newPKI(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	f := p.Files
	for _, pair := range [][2]string{
		{f.ServingCert, f.ServingKey}, {f.FrontProxyClientCert, f.FrontProxyClientKey}, {f.AdminCert, f.AdminKey},
		{f.KubeletClientCert, f.KubeletClientKey},
	} {
		if _, err := tls.LoadX509KeyPair(pair[0], pair[1]); err != nil {
			t.Errorf("loading %s: %v", pair[0], err)
		}
	}
	saKey, err := os.ReadFile(f.ServiceAccountKey)
	if err != nil {
		t.Fatal(err)
	}
	saPub, err := os.ReadFile(f.ServiceAccountPub)
	if err != nil {
		t.Fatal(err)
	}
	keyBlock, _ := pem.Decode(saKey)
	pubBlock, _ := pem.Decode(saPub)
	if keyBlock == nil || pubBlock == nil {
		t.Fatal("service-account key files are not PEM")
	}
	priv, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.ParsePKIXPublicKey(pubBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !priv.(*ecdsa.PrivateKey).PublicKey.Equal(pub) {
		t.Error("service-account public key does not match the signing key")
	}

	tokens, err := os.ReadFile(f.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(tokens)), "\n")
	wantLines := []string{
		p.AdminToken + "," + AdminUser + "," + AdminUser + `-uid,"system:masters"`,
		p.UserToken + "," + UnprivilegedUser + "," + UnprivilegedUser + "-uid",
	}
	if !slices.Equal(lines, wantLines) {
		t.Errorf("token file = %q, want %q", lines, wantLines)
	}
	if p.AdminToken == p.UserToken || len(p.AdminToken) < 32 {
		t.Errorf("tokens %q and %q are not distinct random values", p.AdminToken, p.UserToken)
	}
	if adminToken, err := os.ReadFile(f.AdminToken); err != nil || string(adminToken) != p.AdminToken+"\n" {
		t.Errorf("admin token file = %q, %v; want the admin token alone", adminToken, err)
	}
	for path, want := range map[string]*x509.Certificate{f.CACert: p.CA, f.FrontProxyCACert: p.FrontProxyCA} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(data)
		if block == nil || block.Type != "CERTIFICATE" || !slices.Equal(block.Bytes, want.Raw) {
			t.Errorf("%s does not hold the CA certificate %s", path, want.Subject)
		}
	}

	for _, path := range []string{f.CACert, f.ServingKey, f.FrontProxyClientKey, f.AdminKey, f.KubeletClientKey, f.ServiceAccountKey, f.Tokens, f.AdminToken} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v, want no group or other access", path, perm)
		}
	}
}
