package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/bench/internal/loadgen"
)

// writeCA writes the test server's certificate as a CA bundle.
func writeCA(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.crt")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(path, block, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadgenRefusesNonLoopbackTargetsWithoutOutput(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	ca := writeCA(t, srv)
	for _, target := range []string{"https://198.51.100.1:6443/", "https://localhost:6443/", "https://example.com:443/"} {
		t.Run(target, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"-url", srv.URL + "/", "-url", target, "-ca-file", ca, "-requests", "1"}, &stdout, &stderr)
			if code == 0 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "loopback") {
				t.Errorf("exit %d, stdout %q, stderr %q; want a refusal naming the loopback rule", code, stdout.String(), stderr.String())
			}
		})
	}
}

func TestLoadgenPrintsOneJSONResult(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("If-None-Match") != `"e"` {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNotModified)
	}))
	defer srv.Close()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-url", srv.URL + "/apis", "-ca-file", writeCA(t, srv), "-token-file", token,
		"-header", `If-None-Match: "e"`, "-expect-status", "304", "-protocol", "http1",
		"-concurrency", "2", "-requests", "30", "-warmup", "2"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var res loadgen.Result
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if res.Count != 30 || res.OK != 30 || res.Protocol != loadgen.HTTP1 || res.Concurrency != 2 || dec.More() {
		t.Errorf("result %+v; want 30 successful HTTP/1.1 requests at concurrency 2, one object", res)
	}
}

func TestLoadgenRejectsMisuse(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	ca := writeCA(t, srv)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no CA", []string{"-url", srv.URL}, "-ca-file"},
		{"cert without key", []string{"-url", srv.URL, "-ca-file", ca, "-cert", "c.pem"}, "go together"},
		{"missing token file", []string{"-url", srv.URL, "-ca-file", ca, "-token-file", filepath.Join(t.TempDir(), "absent")}, "-token-file"},
		{"bad header", []string{"-url", srv.URL, "-ca-file", ca, "-header", "nocolon"}, "header"},
		{"stray argument", []string{"-url", srv.URL, "-ca-file", ca, "extra"}, "unexpected"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", code, stderr.String(), c.want)
			}
		})
	}
}
