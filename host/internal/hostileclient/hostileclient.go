// Package hostileclient sends what an anonymous client may send to try to
// harm a gateway, including what Go's own HTTP client refuses to send: an
// invalid :authority, a body shorter than its content-length, malformed
// chunked framing, streams that never open their flow-control window. The
// tests of the gateway, of skewgate serve and of the real clusters use it; no
// shipped binary does.
package hostileclient

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// HTTP1 sends request, written by hand, on a new TLS connection to addr and
// returns the status of the answer, or an error when none came within wait.
func HTTP1(addr string, cfg *tls.Config, request string, wait time.Duration) (int, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(conn, request); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// MalformedChunkedBody is an HTTP/1.1 POST to path whose chunked body has a
// chunk size that is not hexadecimal.
func MalformedChunkedBody(path string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: kubernetes\r\nContent-Type: application/json\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\nzz\r\n"
}

// H2Conn is an HTTP/2 client connection driven frame by frame. It answers
// the server's SETTINGS and PING and records each stream's response status;
// it never sends WINDOW_UPDATE, so the server can send a stream no more than
// the window the connection announced at its start.
type H2Conn struct {
	conn *tls.Conn

	writeMu sync.Mutex
	framer  *http2.Framer
	enc     *hpack.Encoder
	block   bytes.Buffer
	nextID  uint32

	mu       sync.Mutex
	statuses map[uint32]int
	resets   map[uint32]http2.ErrCode
	changed  chan struct{}
	readErr  error
}

// DialH2 opens an HTTP/2 connection to addr announcing streamWindow as every
// stream's initial flow-control window (0: the server can send no DATA).
func DialH2(addr string, cfg *tls.Config, streamWindow uint32) (*H2Conn, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	if conn.ConnectionState().NegotiatedProtocol != "h2" {
		conn.Close()
		return nil, errors.New("the server did not negotiate HTTP/2")
	}
	c := &H2Conn{conn: conn, nextID: 1, statuses: map[uint32]int{}, resets: map[uint32]http2.ErrCode{}, changed: make(chan struct{})}
	c.framer = http2.NewFramer(conn, conn)
	c.enc = hpack.NewEncoder(&c.block)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.framer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow}); err != nil {
		conn.Close()
		return nil, err
	}
	go c.readLoop()
	return c, nil
}

// H2Stream sends one stream on a new HTTP/2 connection to addr with send and
// returns the status of its answer, or an error when none came within wait.
func H2Stream(addr string, cfg *tls.Config, wait time.Duration, send func(*H2Conn) (uint32, error)) (int, error) {
	c, err := DialH2(addr, cfg, 1<<16)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	id, err := send(c)
	if err != nil {
		return 0, err
	}
	return c.Status(id, wait)
}

// Close closes the connection.
func (c *H2Conn) Close() error { return c.conn.Close() }

// Request opens a stream with the given header fields (pseudo-headers
// first, as the caller orders them) and sends body; endStream closes the
// client's side after it. It returns the stream's ID.
func (c *H2Conn) Request(fields [][2]string, body []byte, endStream bool) (uint32, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.block.Reset()
	for _, f := range fields {
		if err := c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return 0, err
		}
	}
	id := c.nextID
	c.nextID += 2
	err := c.framer.WriteHeaders(http2.HeadersFrameParam{
		StreamID:      id,
		BlockFragment: c.block.Bytes(),
		EndStream:     endStream && len(body) == 0,
		EndHeaders:    true,
	})
	if err == nil && len(body) > 0 {
		err = c.framer.WriteData(id, endStream, body)
	}
	return id, err
}

// Get opens a stream for GET path with the given authority.
func (c *H2Conn) Get(authority, path string) (uint32, error) {
	return c.Request([][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", path}}, nil, true)
}

// ShortBody opens a POST to path announcing a content-length of announced
// bytes and ends the stream after sending body.
func (c *H2Conn) ShortBody(path string, announced int, body []byte) (uint32, error) {
	return c.Request([][2]string{
		{":method", "POST"}, {":scheme", "https"}, {":authority", "kubernetes"}, {":path", path},
		{"content-type", "application/json"}, {"content-length", strconv.Itoa(announced)},
	}, body, true)
}

// Status waits up to wait for the stream's response status; a stream the
// server reset, or a connection that ended, is an error.
func (c *H2Conn) Status(id uint32, wait time.Duration) (int, error) {
	deadline := time.After(wait)
	for {
		c.mu.Lock()
		status, answered := c.statuses[id]
		code, reset := c.resets[id]
		readErr, changed := c.readErr, c.changed
		c.mu.Unlock()
		switch {
		case answered:
			return status, nil
		case reset:
			return 0, fmt.Errorf("stream %d reset by the server: %v", id, code)
		case readErr != nil:
			return 0, readErr
		}
		select {
		case <-changed:
		case <-deadline:
			return 0, fmt.Errorf("stream %d: no answer within %v", id, wait)
		}
	}
}

// Reset reports whether the server reset the stream.
func (c *H2Conn) Reset(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, reset := c.resets[id]
	return reset
}

func (c *H2Conn) readLoop() {
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := c.framer.ReadFrame()
		if err != nil {
			c.update(func() { c.readErr = err })
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.write(func() error { return c.framer.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.write(func() error { return c.framer.WritePing(true, f.Data) })
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				c.update(func() { c.readErr = err })
				return
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					status, _ := strconv.Atoi(hf.Value)
					c.update(func() {
						if _, seen := c.statuses[f.StreamID]; !seen || status >= 200 {
							c.statuses[f.StreamID] = status
						}
					})
				}
			}
		case *http2.RSTStreamFrame:
			c.update(func() { c.resets[f.StreamID] = f.ErrCode })
		case *http2.GoAwayFrame:
			c.update(func() { c.readErr = fmt.Errorf("the server sent GOAWAY: %v", f.ErrCode) })
		}
	}
}

func (c *H2Conn) write(frame func() error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = frame()
}

func (c *H2Conn) update(change func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	change()
	close(c.changed)
	c.changed = make(chan struct{})
}
