package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/skewgate/skewgate/host/internal/logtest"
	"github.com/skewgate/skewgate/host/testcluster"
)

// kubectlProcess is a kubectl running in the background: its standard input open, its standard
// output delivered line by line.
type kubectlProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr logtest.Buffer
	exited chan struct{}
	// Valid once exited is closed.
	err error
}

// start runs kubectl with args and env added to its environment; it is killed, if still running,
// when the test ends.
func (k *kubectl) start(t *testing.T, env []string, args ...string) *kubectlProcess {
	t.Helper()
	cmd := k.command(t.Context(), args...)
	cmd.Env = append(cmd.Env, env...)
	p := &kubectlProcess{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{})}
	cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			p.lines <- scanner.Text()
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if !p.ended() {
			_ = cmd.Process.Kill()
		}
		<-p.exited
	})
	return p
}

func (p *kubectlProcess) ended() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// nextLine waits for the next line of standard output accept takes, skipping others (progress
// messages such as port-forward's "Handling connection").
func (p *kubectlProcess) nextLine(what string, timeout time.Duration, accept func(string) bool) (string, error) {
	deadline := time.After(timeout)
	for {
		select {
		case line := <-p.lines:
			if accept(line) {
				return line, nil
			}
		case <-p.exited:
			// Every line was queued before the exit was recorded.
			for {
				select {
				case line := <-p.lines:
					if accept(line) {
						return line, nil
					}
				default:
					return "", fmt.Errorf("kubectl ended (%v) before %s; stderr:\n%s", p.err, what, tailLines(p.stderr.String(), 20))
				}
			}
		case <-deadline:
			return "", fmt.Errorf("no %s within %s", what, timeout)
		}
	}
}

func (p *kubectlProcess) expectLine(want string, timeout time.Duration) error {
	_, err := p.nextLine(fmt.Sprintf("line %q", want), timeout, func(line string) bool { return line == want })
	return err
}

// exitCode is the exit code of a process that ended with err (from Wait or Run), -1 if it was
// killed by a signal or did not run.
func exitCode(err error) int {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// echoLine sends line on conn and reads it back from the echo at the other end.
func echoLine(conn net.Conn, line string, timeout time.Duration) error {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, line+"\n"); err != nil {
		return err
	}
	got := make([]byte, len(line)+1)
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("reading the echo of %q: %w", line, err)
	}
	if string(got) != line+"\n" {
		return fmt.Errorf("echo of %q came back as %q", line, got)
	}
	return nil
}

// webSocketWatch is a watch over a WebSocket, as browsers and dashboards open them: one upgraded
// connection carrying one event per message.
type webSocketWatch struct {
	*watchStream
	conn *websocket.Conn
}

// openWebSocketWatch upgrades a watch of rawURL (https) with dialer and header.
func openWebSocketWatch(t *testing.T, rawURL string, dialer *websocket.Dialer, header http.Header) *webSocketWatch {
	t.Helper()
	conn, resp, err := dialer.DialContext(t.Context(), "wss"+strings.TrimPrefix(rawURL, "https"), header)
	if err != nil {
		status := "no response"
		if resp != nil {
			body, _ := io.ReadAll(resp.Body)
			status = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, body)
		}
		t.Fatalf("opening the WebSocket watch %s: %v (%s)", rawURL, err, status)
	}
	w := &webSocketWatch{watchStream: &watchStream{events: make(chan watchEvent, 1024), done: make(chan struct{})}, conn: conn}
	go func() {
		defer close(w.done)
		for {
			_, message, err := conn.ReadMessage()
			if err != nil {
				w.err, w.ended = err, time.Now()
				return
			}
			var ev watchEvent
			if err := json.Unmarshal(message, &ev); err != nil {
				w.err, w.ended = fmt.Errorf("decoding a watch event: %w", err), time.Now()
				return
			}
			select {
			case w.events <- ev:
			default:
				w.err, w.ended = errors.New("the test did not keep up with the watch"), time.Now()
				return
			}
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-w.done
	})
	return w
}

// auditEvent is the part of an audit.k8s.io/v1 Event the stream scenarios look at.
type auditEvent struct {
	AuditID   string   `json:"auditID"`
	Stage     string   `json:"stage"`
	Verb      string   `json:"verb"`
	UserAgent string   `json:"userAgent"`
	User      userInfo `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
}

// auditEvents returns the events of server i's audit log that match selects.
func auditEvents(cluster *testcluster.Cluster, i int, match func(auditEvent) bool) ([]auditEvent, error) {
	data, err := os.ReadFile(cluster.AuditLog(i))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var events []auditEvent
	for line := range bytes.Lines(data) {
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			// The server may be writing this very line.
			continue
		}
		if match(ev) {
			events = append(events, ev)
		}
	}
	return events, nil
}

// auditedRequest is a request a server audited.
type auditedRequest struct {
	server int
	event  auditEvent
}

// auditedRequests are the requests match selects, by audit ID, with the server of each.
func auditedRequests(cluster *testcluster.Cluster, match func(auditEvent) bool) (map[string]auditedRequest, error) {
	requests := map[string]auditedRequest{}
	for i := range cluster.Servers() {
		events, err := auditEvents(cluster, i, match)
		if err != nil {
			return nil, err
		}
		for _, ev := range events {
			requests[ev.AuditID] = auditedRequest{server: i, event: ev}
		}
	}
	return requests, nil
}

// waitAudited waits until exactly one request match selects was audited, and returns it.
func waitAudited(t *testing.T, cluster *testcluster.Cluster, what string, match func(auditEvent) bool) auditedRequest {
	t.Helper()
	var found auditedRequest
	eventually(t, "the audit log records "+what, 30*time.Second, 100*time.Millisecond, func() error {
		requests, err := auditedRequests(cluster, match)
		if err != nil {
			return err
		}
		if len(requests) != 1 {
			return fmt.Errorf("%d audited requests", len(requests))
		}
		for _, r := range requests {
			found = r
		}
		return nil
	})
	return found
}

// checkAdmin fails unless the audited identity is the cluster admin the stream's credentials name.
func checkAdmin(ev auditEvent) error {
	if ev.User.Username != testcluster.AdminUser || !slices.Contains(ev.User.Groups, "system:masters") {
		return fmt.Errorf("the API server audited the request as %q %v, want %s in system:masters", ev.User.Username, ev.User.Groups, testcluster.AdminUser)
	}
	return nil
}
