package gateway

import (
	"context"
	"net"
	"sync"
	"time"
)

// sessions are the client connections of switched-protocol sessions (exec,
// attach, port-forward). http.Server forgets a connection once it is
// hijacked, so its Shutdown neither waits for these nor ends them; the gateway
// keeps them to do both.
type sessions struct {
	// stallTimeout bounds each write to a session's client.
	stallTimeout time.Duration

	mu    sync.Mutex
	conns map[*sessionConn]struct{}
}

// sessionConn leaves its set when closed, by whichever side ends the session.
type sessionConn struct {
	net.Conn
	owner *sessions
	once  sync.Once
}

func (c *sessionConn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.conns, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}

func (s *sessions) track(conn net.Conn) net.Conn {
	c := &sessionConn{Conn: &stallBoundConn{Conn: conn, timeout: s.stallTimeout}, owner: s}
	s.mu.Lock()
	if s.conns == nil {
		s.conns = map[*sessionConn]struct{}{}
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return c
}

func (s *sessions) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// DrainSessions waits until every switched-protocol session has ended or ctx
// is done, then closes those still open and returns how many it closed.
func (g *Gateway) DrainSessions(ctx context.Context) int {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for g.sessions.open() > 0 {
		select {
		case <-ctx.Done():
			g.sessions.mu.Lock()
			open := make([]*sessionConn, 0, len(g.sessions.conns))
			for c := range g.sessions.conns {
				open = append(open, c)
			}
			g.sessions.mu.Unlock()
			for _, c := range open {
				_ = c.Close()
			}
			return len(open)
		case <-tick.C:
		}
	}
	return 0
}
