package server

import (
	"errors"
	"net"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// authTimeout bounds the secret handshake of one connection on the socket path.
const authTimeout = 10 * time.Second

// ServeSecret accepts connections on l (the socket the host reaches through the bind
// mount) until l is closed. Each connection must prove secret first
// (agent.AuthenticateHost); one that does not is closed. Then it is served like any
// other (ServeConn: Hello, version check, yamux).
func (s *Server) ServeSecret(l net.Listener, secret []byte) error {
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			_ = conn.SetDeadline(time.Now().Add(authTimeout))
			if err := agent.AuthenticateHost(conn, secret); err != nil {
				s.log.Warn("refused a connection on the agent socket", "err", err)
				conn.Close()
				return
			}
			_ = conn.SetDeadline(time.Time{})
			s.ServeConn(conn)
		}()
	}
}
