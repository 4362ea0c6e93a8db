package testcluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
)

const kubeletTestTimeout = 30 * time.Second

// testKubelet serves a kubelet without a cluster, running pod ns/pod.
func testKubelet(t *testing.T) (*Kubelet, *PKI) {
	t.Helper()
	pki, err := newPKI(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	k, err := serveKubelet(pki, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	if _, err := k.startContainer("ns", "pod"); err != nil {
		t.Fatal(err)
	}
	return k, pki
}

// apiServerConfig reaches the kubelet as the API servers do: the kubelet client certificate,
// the kubelet verified against the cluster CA.
func apiServerConfig(k *Kubelet, pki *PKI) *rest.Config {
	return &rest.Config{Host: k.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData:   pki.caPEM,
		CertFile: pki.Files.KubeletClientCert,
		KeyFile:  pki.Files.KubeletClientKey,
	}}
}

func execURL(k *Kubelet, path string, command []string, stdin bool) string {
	q := url.Values{"output": {"1"}, "error": {"1"}, "command": command}
	if stdin {
		q.Set("input", "1")
	}
	return k.URL + path + "?" + q.Encode()
}

func TestKubeletExecRunsTheEchoContainersCommandsOverSPDYAndWebSocket(t *testing.T) {
	k, pki := testKubelet(t)
	config := apiServerConfig(k, pki)
	executors := map[string]func(u string) (remotecommand.Executor, error){
		"SPDY": func(u string) (remotecommand.Executor, error) {
			parsed, err := url.Parse(u)
			if err != nil {
				return nil, err
			}
			return remotecommand.NewSPDYExecutor(config, http.MethodPost, parsed)
		},
		// Kubelets and container runtimes speak WebSocket up to v4; v5 ends at the API server,
		// which goes on over SPDY.
		"WebSocket v4": func(u string) (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutorForProtocols(config, http.MethodGet, u, "v4.channel.k8s.io")
		},
	}
	for _, tc := range []struct {
		name           string
		command        []string
		stdin          string
		stdout, stderr string
		code           int
	}{
		{"stdout, stderr and an exit code", []string{"sh", "-c", "echo hi; echo bye >&2; exit 3"}, "", "hi\n", "bye\n", 3},
		{"stdin to stdout", []string{"sh", "-c", "cat; echo bye >&2; exit 3"}, "hello\nworld\n", "hello\nworld\n", "bye\n", 3},
		{"echo alone", []string{"echo", "a", "b"}, "", "a b\n", "", 0},
		{"unknown command", []string{"sh", "-c", "nosuch; echo after"}, "", "after\n", "sh: nosuch: not found\n", 0},
		{"unknown program", []string{"nosuch"}, "", "", "sh: nosuch: not found\n", 127},
	} {
		for protocol, newExecutor := range executors {
			// WebSocket before v5 cannot tell the end of standard input, so cat would never end:
			// standard input is tried over SPDY.
			if tc.stdin != "" && protocol != "SPDY" {
				continue
			}
			t.Run(tc.name+" over "+protocol, func(t *testing.T) {
				exec, err := newExecutor(execURL(k, "/exec/ns/pod/echo", tc.command, tc.stdin != ""))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), kubeletTestTimeout)
				defer cancel()
				var stdout, stderr bytes.Buffer
				opts := remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}
				if tc.stdin != "" {
					opts.Stdin = strings.NewReader(tc.stdin)
				}
				err = exec.StreamWithContext(ctx, opts)
				code := 0
				var exitErr utilexec.CodeExitError
				switch {
				case errors.As(err, &exitErr):
					code = exitErr.Code
				case err != nil:
					t.Fatalf("exec: %v", err)
				}
				if code != tc.code || stdout.String() != tc.stdout || stderr.String() != tc.stderr {
					t.Errorf("exec %q = code %d, stdout %q, stderr %q; want %d, %q, %q", tc.command, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
				}
			})
		}
	}
}

func TestKubeletAttachEchoesStandardInput(t *testing.T) {
	k, pki := testKubelet(t)
	u, err := url.Parse(execURL(k, "/attach/ns/pod/echo", nil, true))
	if err != nil {
		t.Fatal(err)
	}
	exec, err := remotecommand.NewSPDYExecutor(apiServerConfig(k, pki), http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubeletTestTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("ping\n"), Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("attach: %v", err)
	}
	if stdout.String() != "ping\n" || stderr.Len() != 0 {
		t.Errorf("attach gave stdout %q, stderr %q; want the input back and nothing on stderr", stdout.String(), stderr.String())
	}
}

func TestKubeletPortForwardEchoesOnEveryConnection(t *testing.T) {
	k, pki := testKubelet(t)
	rt, upgrader, err := spdy.RoundTripperFor(apiServerConfig(k, pki))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(k.URL + "/portForward/ns/pod")
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	var out, errOut bytes.Buffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(int(EchoPort))}, stop, ready, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	forwarded := make(chan error, 1)
	go func() { forwarded <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		<-forwarded
	}()
	select {
	case <-ready:
	case err := <-forwarded:
		t.Fatalf("port-forward ended before it was ready: %v", err)
	case <-time.After(kubeletTestTimeout):
		t.Fatal("port-forward not ready")
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(kubeletTestTimeout))
		want := "connection " + strconv.Itoa(i) + "\n"
		if _, err := io.WriteString(conn, want); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err != nil || got != want {
			t.Fatalf("connection %d echoed %q, %v; want %q", i, got, err, want)
		}
	}
}

// kubeletClient is an HTTPS client of the kubelet presenting certs.
func kubeletClient(pki *PKI, certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: kubeletTestTimeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pki.CAPool(), Certificates: certs, MinVersion: tls.VersionTLS12,
	}}}
}

func TestKubeletFollowedLogDeliversEachLineAsItIsWritten(t *testing.T) {
	k, pki := testKubelet(t)
	if err := k.WriteLog("ns", "pod", "first"); err != nil {
		t.Fatal(err)
	}
	resp, err := kubeletClient(pki, pki.KubeletClient).Get(k.URL + "/containerLogs/ns/pod/echo?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("containerLogs: HTTP %d", resp.StatusCode)
	}
	lines := bufio.NewReader(resp.Body)
	for _, want := range []string{"first", "second", "third"} {
		if want != "first" {
			if err := k.WriteLog("ns", "pod", want); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := lines.ReadString('\n'); err != nil || got != want+"\n" {
			t.Fatalf("followed log line = %q, %v; want %q", got, err, want)
		}
	}
	k.Close()
	if rest, err := io.ReadAll(lines); err != nil || len(rest) != 0 {
		t.Errorf("after the kubelet closed, the followed log gave %q, %v; want its end", rest, err)
	}
}

func TestKubeletServesOnlyTheAPIServersAndItsOwnPods(t *testing.T) {
	k, pki := testKubelet(t)
	admin := kubeletClient(pki, pki.Admin)
	apiServer := kubeletClient(pki, pki.KubeletClient)
	other, err := pki.NewClient(pkix.Name{CommonName: "system:node:node-b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		client *http.Client
		path   string
		want   int
	}{
		{"the API servers", apiServer, "/containerLogs/ns/pod/echo", http.StatusOK},
		{"another client of the cluster CA", admin, "/containerLogs/ns/pod/echo", http.StatusForbidden},
		{"another node", kubeletClient(pki, other.TLSCertificate()), "/containerLogs/ns/pod/echo", http.StatusForbidden},
		{"a pod it does not run", apiServer, "/containerLogs/ns/other/echo", http.StatusNotFound},
		{"a container the pod lacks", apiServer, "/containerLogs/ns/pod/sidecar", http.StatusNotFound},
		{"a log option it does not keep", apiServer, "/containerLogs/ns/pod/echo?timestamps=true", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tc.client.Get(k.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s = %d, want %d", tc.path, resp.StatusCode, tc.want)
			}
		})
	}
	t.Run("no client certificate", func(t *testing.T) {
		resp, err := kubeletClient(pki).Get(k.URL + "/containerLogs/ns/pod/echo")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("GET without a client certificate = %d, want a refused handshake", resp.StatusCode)
		}
	})
	var clients []string
	for _, r := range k.Requests() {
		clients = append(clients, r.Client)
	}
	want := []string{KubeletClientName, AdminUser, "system:node:node-b", KubeletClientName, KubeletClientName, KubeletClientName}
	if strings.Join(clients, ",") != strings.Join(want, ",") {
		t.Errorf("the kubelet recorded clients %q, want %q", clients, want)
	}
}
