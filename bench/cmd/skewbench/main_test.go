package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/bench/internal/report"
)

// passingFigures meet every budget.
var passingFigures = map[string]float64{
	report.FigureReroutedAddedP50: 0.3, report.FigureReroutedRPS: 1.6, report.FigureForwardAddedP50: 1.0,
	report.FigureForwardRPS: 0.99, report.FigureAPIsRPS: 3, report.FigurePluginOverNative: 12,
	report.FigureRouting: 0.2, report.FigureDecideAllocs: 0, report.FigureMerge: 0.5,
	report.FigureNodeLocalAddedP50: 1.05, report.FigureNodeLocalRSS: 48, report.FigureNodeLocalReadyWarm: 0.5,
	report.FigureNodeLocalReadyCold: 2.5, report.FigureForwardCPU: 1.1, report.FigureAPIsCPU: 0.4,
}

func saveResults(t *testing.T, dir, date string, figures map[string]float64) {
	t.Helper()
	r := &report.Results{Date: date, Machine: report.Machine{CPU: "test CPU", Go: "go1.26.8"}}
	for key, v := range figures {
		r.Figures = append(r.Figures, report.Figure{Key: key, Value: report.Number(v)})
	}
	if _, err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
}

func TestCheckPrintsAVerdictPerBudgetForTheNewestResults(t *testing.T) {
	failing := map[string]float64{}
	for k, v := range passingFigures {
		failing[k] = v
	}
	failing[report.FigureForwardRPS] = 0.9
	tooBig := map[string]float64{}
	for k, v := range passingFigures {
		tooBig[k] = v
	}
	tooBig[report.FigureNodeLocalRSS] = 65
	cases := []struct {
		name      string
		newest    map[string]float64
		wantCode  int
		wantFails int
		wantFail  string
	}{
		{"every budget met", passingFigures, 0, 0, ""},
		{"one budget missed", failing, 1, 1, "FAIL  no re-route: skewgate's rps >= 0.95"},
		{"node-local memory over budget", tooBig, 1, 1, "FAIL  node-local skewgate: resident memory (VmRSS) after the rounds <= 64 MiB: 65 (budget <= 64)"},
		{"figures missing", map[string]float64{}, 1, len(report.Budgets), "FAIL  ParseRequestInfo+Decide <= 0.25 x upstream's RequestInfo + lookup (all request kinds): missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			saveResults(t, dir, "2025-06-01", map[string]float64{})
			saveResults(t, dir, "2026-01-20", c.newest)
			var stdout, stderr bytes.Buffer
			code := run([]string{"check", "-results", dir}, &stdout, &stderr)
			if code != c.wantCode {
				t.Fatalf("exit %d; want %d\n%s%s", code, c.wantCode, stdout.String(), stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if !strings.Contains(lines[0], "2026-01-20.json") || len(lines) != 1+len(report.Budgets) {
				t.Fatalf("output does not check the newest file, one line per budget:\n%s", stdout.String())
			}
			fails := 0
			for _, line := range lines[1:] {
				switch {
				case strings.HasPrefix(line, "FAIL  "):
					fails++
				case !strings.HasPrefix(line, "PASS  "):
					t.Errorf("line %q is neither PASS nor FAIL", line)
				}
			}
			if fails != c.wantFails || !strings.Contains(stdout.String(), c.wantFail) {
				t.Errorf("%d FAIL lines; want %d including %q:\n%s", fails, c.wantFails, c.wantFail, stdout.String())
			}
		})
	}
}

func TestCheckWithoutResultsIsAnError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"check", "-results", t.TempDir()}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "make bench") {
		t.Errorf("exit %d, stderr %q; want 1 and a hint to run make bench", code, stderr.String())
	}
}

func TestUsageErrors(t *testing.T) {
	cases := [][]string{nil, {"bench"}, {"check", "-bogus"}, {"check", "stray"}, {"run", "-rounds"}}
	for _, args := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) = %d; want 2", args, code)
		}
	}
}

func writeCertificatePEM(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPlainProxySpreadsRequestsOverItsBackendsInTurn(t *testing.T) {
	var hits [2]atomic.Int64
	var backends []string
	var ca string
	for i := range hits {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			if r.Host != "gateway.example" || r.Header.Get("Authorization") != "Bearer t" {
				w.WriteHeader(http.StatusBadRequest)
			}
		}))
		srv.EnableHTTP2 = true
		srv.StartTLS()
		defer srv.Close()
		backends = append(backends, srv.URL)
		// httptest servers share one certificate, valid for example.com.
		ca = writeCertificatePEM(t, srv)
	}
	proxy, err := newPlainProxy(backends, ca, "example.com")
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		req := httptest.NewRequest(http.MethodGet, "https://gateway.example/api/v1/pods", nil)
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	}
	if hits[0].Load() != 3 || hits[1].Load() != 3 {
		t.Errorf("backend hits %d and %d; want 3 each", hits[0].Load(), hits[1].Load())
	}
}

func TestPlainProxyRefusesNonLoopbackBackendsAndMissingCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	ca := writeCertificatePEM(t, srv)
	cases := []struct {
		name     string
		backends []string
		ca       string
	}{
		{"no backend", nil, ca},
		{"remote backend", []string{"https://203.0.113.9:6443"}, ca},
		{"plain HTTP backend", []string{"http://127.0.0.1:6443"}, ca},
		{"no CA", []string{srv.URL}, filepath.Join(t.TempDir(), "absent.crt")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := newPlainProxy(c.backends, c.ca, "example.com"); err == nil {
				t.Error("newPlainProxy succeeded; want an error")
			}
		})
	}
}

func TestEveryMacroPathHasATarget(t *testing.T) {
	e := &macroEnv{skewgateURL: "https://127.0.0.1:8000", plainURL: "https://127.0.0.1:8001",
		plainLocalURL: "https://127.0.0.1:8002", tcpLocalURL: "https://127.0.0.1:8003", nodeLocalURL: "https://127.0.0.1:8004",
		skewgateETag: `"S"`, apiserverETag: `"A"`}
	for i := range clusterSpec {
		e.serverURLs = append(e.serverURLs, fmt.Sprintf("https://127.0.0.1:700%d", i))
	}
	cases := []struct {
		id       string
		urls     []string
		status   int
		ifMatch  string
		discover bool
	}{
		{report.PathDirect, []string{"https://127.0.0.1:7000" + commonPath, "https://127.0.0.1:7001" + commonPath, "https://127.0.0.1:7002" + commonPath}, 200, "", false},
		{report.PathPlainProxy, []string{"https://127.0.0.1:8001" + commonPath}, 200, "", false},
		{report.PathSkewgate, []string{"https://127.0.0.1:8000" + commonPath}, 200, "", false},
		// The node-local paths all end at the v1.35.4 server.
		{report.PathDirectLocal, []string{"https://127.0.0.1:7000" + commonPath}, 200, "", false},
		{report.PathPlainProxyLocal, []string{"https://127.0.0.1:8002" + commonPath}, 200, "", false},
		{report.PathTCPProxyLocal, []string{"https://127.0.0.1:8003" + commonPath}, 200, "", false},
		{report.PathSkewgateNodeLocal, []string{"https://127.0.0.1:8004" + commonPath}, 200, "", false},
		{report.PathDirectCapable, []string{"https://127.0.0.1:7002" + reroutedPath}, 200, "", false},
		{report.PathSkewgateRerouted, []string{"https://127.0.0.1:8000" + reroutedPath}, 200, "", false},
		{report.PathMVPRerouted, []string{"https://127.0.0.1:7001" + reroutedPath}, 200, "", false},
		{report.PathSkewgateAPIs, []string{"https://127.0.0.1:8000/apis"}, 200, "", true},
		{report.PathAPIServerAPIs, []string{"https://127.0.0.1:7001/apis"}, 200, "", true},
		{report.PathSkewgateAPIs304, []string{"https://127.0.0.1:8000/apis"}, 304, `"S"`, true},
		{report.PathAPIServerAPIs304, []string{"https://127.0.0.1:7001/apis"}, 304, `"A"`, true},
	}
	if len(cases) != len(report.MacroPaths) {
		t.Fatalf("%d cases for %d macro paths", len(cases), len(report.MacroPaths))
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			got := e.target(c.id)
			if strings.Join(got.urls, " ") != strings.Join(c.urls, " ") || got.status != c.status {
				t.Errorf("target %+v; want urls %v, status %d", got, c.urls, c.status)
			}
			headers := strings.Join(got.headers, "\n")
			if c.discover != strings.Contains(headers, "Accept: "+acceptDiscovery) {
				t.Errorf("headers %q; want the discovery Accept: %v", headers, c.discover)
			}
			if c.ifMatch != "" && !strings.Contains(headers, "If-None-Match: "+c.ifMatch) {
				t.Errorf("headers %q; want If-None-Match %s", headers, c.ifMatch)
			}
		})
	}
}

func TestCPUModel(t *testing.T) {
	info := []byte("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
	if got := cpuModel(info); got != "AMD EPYC 7B13" {
		t.Errorf("cpuModel = %q", got)
	}
	if got := cpuModel([]byte("processor\t: 0\n")); got != "" {
		t.Errorf("cpuModel without a model name = %q; want empty", got)
	}
}

// startTCPProxyForTest serves a TCP proxy to backend on a loopback port; stop
// ends it and returns what serveTCPProxy returned.
func startTCPProxyForTest(t *testing.T, backend string) (addr string, stop func() error) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveTCPProxy(ctx, ln, backend, log.New(io.Discard, "", 0)) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-served:
			case <-time.After(10 * time.Second):
				result = errors.New("serveTCPProxy did not return after its context ended")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return ln.Addr().String(), stop
}

// loopbackListener is a TCP listener on a free loopback port.
func loopbackListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestTCPProxyCopiesBothWaysAndPassesHalfClosesOn(t *testing.T) {
	backend := loopbackListener(t)
	go func() {
		conn, err := backend.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		// Echo until the client's end of stream, then end ours: the client
		// only sees EOF if the proxy passes both half-closes on.
		if _, err := io.Copy(conn, conn); err == nil {
			_ = conn.(*net.TCPConn).CloseWrite()
		}
	}()
	addr, stop := startTCPProxyForTest(t, backend.Addr().String())
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// More than the socket buffers hold, so both directions flow at once.
	sent := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	wrote := make(chan error, 1)
	go func() {
		_, err := conn.Write(sent)
		if err == nil {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		wrote <- err
	}()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing: %v", err)
	}
	if !bytes.Equal(got, sent) {
		t.Errorf("echoed %d bytes; want the %d sent, unchanged", len(got), len(sent))
	}
	if err := stop(); err != nil {
		t.Errorf("serveTCPProxy = %v; want nil after its context ended", err)
	}
}

func TestTCPProxyClosesEveryConnectionWhenItStops(t *testing.T) {
	backend := loopbackListener(t)
	backendConn := make(chan net.Conn, 1)
	go func() {
		if conn, err := backend.Accept(); err == nil {
			backendConn <- conn
		}
	}()
	addr, stop := startTCPProxyForTest(t, backend.Addr().String())
	client, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var server net.Conn
	select {
	case server = <-backendConn:
		defer server.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not connect to the backend")
	}
	if err := stop(); err != nil {
		t.Fatalf("serveTCPProxy = %v; want nil after its context ended", err)
	}
	for name, conn := range map[string]net.Conn{"client": client, "backend": server} {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s side read %d bytes, %v; want the connection closed by the proxy", name, n, err)
		}
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("the proxy still accepts connections after it stopped")
	}
}

func TestTCPProxyClosesTheClientWhenTheBackendRefuses(t *testing.T) {
	refused := loopbackListener(t)
	backend := refused.Addr().String()
	refused.Close()
	addr, _ := startTCPProxyForTest(t, backend)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read %d bytes, %v; want the connection closed", n, err)
	}
}

func TestTCPProxyAcceptsOnlyLoopbackAddresses(t *testing.T) {
	cases := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:6443", true},
		{"127.0.0.1:0", true},
		{"[::1]:6443", true},
		{"0.0.0.0:6443", false},
		{"203.0.113.9:6443", false},
		{"localhost:6443", false},
		{"[fe80::1%lo]:6443", false},
		{"127.0.0.1", false},
		{"", false},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			if _, err := loopbackAddrPort("-backend", c.addr); (err == nil) != c.ok {
				t.Errorf("loopbackAddrPort(%q) = %v; want ok=%v", c.addr, err, c.ok)
			}
		})
	}
}

func TestParseProcessCPUAddsUserAndSystemTicks(t *testing.T) {
	// A command name with spaces and a parenthesis, then fields 3 to 17:
	// utime (14) 250 ticks, stime (15) 50 ticks; cutime and cstime (16, 17),
	// the children's, are left out.
	stat := "1234 (we (ird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 7 9 20 0 12 0 100 0\n"
	got, err := parseProcessCPU(stat)
	if err != nil || got != 3*time.Second {
		t.Errorf("parseProcessCPU = %v, %v; want 3s", got, err)
	}
	if _, err := parseProcessCPU("1234 (short) S 1 2"); err == nil {
		t.Error("a truncated stat line parsed")
	}
	if own, err := processCPU(os.Getpid()); err != nil || own <= 0 {
		t.Errorf("processCPU(self) = %v, %v; want a positive time", own, err)
	}
}

func TestParseAllocBytesFindsTheCounterInAnExposition(t *testing.T) {
	exposition := "# HELP go_memstats_alloc_bytes Number of bytes allocated and still in use.\n" +
		"go_memstats_alloc_bytes 1.5e+06\n" +
		"# TYPE go_memstats_alloc_bytes_total counter\n" +
		"go_memstats_alloc_bytes_total 2.5e+09\n"
	if got, err := parseAllocBytes(exposition); err != nil || got != 2.5e9 {
		t.Errorf("parseAllocBytes = %v, %v; want 2.5e9", got, err)
	}
	if _, err := parseAllocBytes("go_memstats_alloc_bytes 1\n"); err == nil {
		t.Error("an exposition without the counter parsed")
	}
}

func TestCallgrindsClosingCountIsRead(t *testing.T) {
	out := "==123== Events    : Ir\n==123== Collected : 834866053\n==123== \n==123== I   refs:      834,866,053\n"
	if m := collected.FindStringSubmatch(out); m == nil || m[1] != "834866053" {
		t.Errorf("collected matched %q; want 834866053", m)
	}
}

func TestMeasureCostTakesOneReadOfTheMetricsOffTheAllocations(t *testing.T) {
	// Every read of the metrics allocates 100 bytes after the count it shows;
	// the measured window allocates 5000.
	var allocated atomic.Int64
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "go_memstats_alloc_bytes_total %d\n", allocated.Load())
		allocated.Add(100)
	}))
	defer metrics.Close()
	e := &macroEnv{client: metrics.Client()}
	c, err := e.measureCost(context.Background(), meter{pid: os.Getpid(), metricsURL: metrics.URL + "/metrics"},
		func() (int, error) {
			allocated.Add(5000)
			return 50, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if c.Requests != 50 || c.AllocBytes != 5000 || c.CPUSeconds < 0 {
		t.Errorf("cost %+v; want 50 requests, 5000 bytes and a CPU time", c)
	}
	noMetrics, err := e.measureCost(context.Background(), meter{pid: os.Getpid()}, func() (int, error) { return 1, nil })
	if err != nil || !math.IsNaN(float64(noMetrics.AllocBytes)) {
		t.Errorf("without metrics: %+v, %v; want no allocation count", noMetrics, err)
	}
}
