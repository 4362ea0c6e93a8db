package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// floodSenders send each flood at once, more than the plugin has VMs on a small machine.
	floodSenders = 4
	// Each sender sends each flood floodRounds times at least, and goes on until the ordinary
	// client got bystanderAnswers answers meanwhile (at most maxFloodRounds times).
	floodRounds      = 2
	bystanderAnswers = 20
	maxFloodRounds   = 200
	// floodAnswerTimeout bounds the wait for the answer to one flood; a gateway that spends
	// seconds on a flood shows up in the logged durations, and starves others long before this.
	floodAnswerTimeout = time.Minute
	bystanderPause     = 20 * time.Millisecond
)

// TestHeaderFloodIsRefusedWithoutStarvingOtherClients sends anonymous requests with thousands of
// headers, X-Remote-* ones the plugin would strip one by one and plain small ones, several at
// once, to a front-proxy gateway: each is answered 431 Request Header Fields Too Large, as
// kube-apiserver and Envoy refuse more header bytes or headers than they accept, while a client
// sending ordinary requests meanwhile gets every answer it would get without the flood.
func TestHeaderFloodIsRefusedWithoutStarvingOtherClients(t *testing.T) {
	cluster := sharedOneCA.get(t)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))

	ctx, stopBystander := context.WithCancel(context.Background())
	bystander := startBystander(ctx, gw.adminClient(), gw.URL+"/api/v1/namespaces/default")
	defer stopBystander()

	for _, flood := range []struct {
		name   string
		header func(i int) string
		count  int
	}{
		{"16,000 X-Remote-* headers", func(i int) string { return fmt.Sprintf("X-Remote-Extra-Flood%05d: v", i) }, 16000},
		{"30,000 small headers", func(i int) string { return fmt.Sprintf("h%05d: v", i) }, 30000},
		// Within the header bytes kube-apiserver and Envoy accept, above the count Envoy accepts.
		{"1,000 X-Remote-* headers", func(i int) string { return fmt.Sprintf("X-Remote-Group: g%04d", i) }, 1000},
	} {
		t.Run(flood.name, func(t *testing.T) {
			var req bytes.Buffer
			fmt.Fprintf(&req, "GET /api/v1/namespaces/default HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", gw.port)
			for i := range flood.count {
				req.WriteString(flood.header(i))
				req.WriteString("\r\n")
			}
			req.WriteString("\r\n")
			t.Logf("%d header bytes", req.Len())

			var wg sync.WaitGroup
			var mu sync.Mutex
			var slowest time.Duration
			var sent atomic.Int64
			answeredBefore := bystander.count()
			for range floodSenders {
				wg.Go(func() {
					for round := 0; round < floodRounds || bystander.count()-answeredBefore < bystanderAnswers && round < maxFloodRounds; round++ {
						sent.Add(1)
						status, took, err := sendRawRequest(gw, req.Bytes())
						mu.Lock()
						slowest = max(slowest, took)
						mu.Unlock()
						switch {
						case err != nil:
							t.Errorf("flood: no answer after %s: %v", took.Round(time.Millisecond), err)
						case status != http.StatusRequestHeaderFieldsTooLarge:
							t.Errorf("flood answered %d after %s, want 431", status, took.Round(time.Millisecond))
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%d floods of %d headers, the slowest answered in %s; the ordinary client got %d answers meanwhile",
				sent.Load(), flood.count, slowest.Round(time.Millisecond), bystander.count()-answeredBefore)
		})
	}
	stopBystander()
	answers := bystander.wait()
	if len(answers) == 0 {
		t.Fatal("the ordinary client sent nothing during the floods")
	}
	failed := 0
	for _, a := range answers {
		if a.err != nil || a.status != http.StatusOK {
			if failed < 10 {
				t.Errorf("ordinary request during the flood at %s: HTTP %d %v: %.200s", a.at.Format("15:04:05.000"), a.status, a.err, a.body)
			}
			failed++
		}
	}
	t.Logf("the ordinary client got %d answers during the floods, %d of them not 200", len(answers), failed)
}

// sendRawRequest writes request on a new HTTP/1.1 connection to the gateway while reading the
// answer: a server may answer and close before the whole request was written.
func sendRawRequest(g *skewgate, request []byte) (status int, took time.Duration, err error) {
	start := time.Now()
	defer func() { took = time.Since(start) }()
	dialer := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 10 * time.Second},
		Config:    &tls.Config{RootCAs: g.ca.Pool(), NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12},
	}
	conn, err := dialer.Dial("tcp", "127.0.0.1:"+strconv.Itoa(g.port))
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(floodAnswerTimeout)); err != nil {
		return 0, 0, err
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		// Fails once the server stops reading and closes: the answer is what counts.
		_, _ = conn.Write(request)
	}()
	defer func() { conn.Close(); <-written }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, 0, nil
}

// bystanderAnswer is one answer to an ordinary client.
type bystanderAnswer struct {
	at     time.Time
	status int
	err    error
	body   []byte
}

type bystander struct {
	done    chan struct{}
	mu      sync.Mutex
	answers []bystanderAnswer
}

// startBystander GETs url again and again until ctx ends.
func startBystander(ctx context.Context, client *http.Client, url string) *bystander {
	b := &bystander{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		defer client.CloseIdleConnections()
		for ctx.Err() == nil {
			a := bystanderAnswer{at: time.Now()}
			resp, err := doContext(ctx, client, http.MethodGet, url, nil, nil)
			if ctx.Err() != nil {
				return
			}
			a.status, a.err, a.body = resp.status, err, resp.body
			b.mu.Lock()
			b.answers = append(b.answers, a)
			b.mu.Unlock()
			time.Sleep(bystanderPause)
		}
	}()
	return b
}

// count is how many answers the bystander got so far.
func (b *bystander) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.answers)
}

// wait returns every answer once the bystander's context has ended.
func (b *bystander) wait() []bystanderAnswer {
	<-b.done
	return b.answers
}
