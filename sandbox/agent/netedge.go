package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/yamux"
)

// The network edges of a workspace ride the agent's connection (DESIGN.md, "Network
// edges"): neither needs a network device in the sandbox, a CNI or a privilege.
//
//   - In (OpDial): the host opens a stream and asks the agent to connect to a port on
//     the sandbox's loopback; after the answer the stream carries that connection's
//     bytes both ways (preview URLs, port forwarding).
//   - Out (OpEgress): the agent's HTTP proxy on EgressProxyAddr opens a stream to the
//     host for every connection a workspace process makes to it; after the request
//     frame the stream carries the connection's bytes, and the host decides what the
//     proxy does with it (package egress). The agent never resolves or dials out.
const (
	OpDial   = "dial"
	OpEgress = "egress"
)

// EgressProxyAddr is where the agent's egress proxy listens inside a sandbox that has
// no network device of its own (EnvEgress).
const EgressProxyAddr = "127.0.0.1:3128"

// EnvEgress, set to "proxy" in the agent's environment, has it run the egress proxy
// and give every command HTTP_PROXY, HTTPS_PROXY and ALL_PROXY (ProxyEnv).
const EnvEgress = "CWS_EGRESS"

// ProxyEnv is the environment every workspace process gets where the proxy runs.
func ProxyEnv() map[string]string {
	u := "http://" + EgressProxyAddr
	noProxy := "localhost,127.0.0.1,::1"
	return map[string]string{
		"HTTP_PROXY": u, "HTTPS_PROXY": u, "ALL_PROXY": u, "NO_PROXY": noProxy,
		"http_proxy": u, "https_proxy": u, "all_proxy": u, "no_proxy": noProxy,
	}
}

// DialArgs asks the agent to connect to 127.0.0.1:Port (or [::1]:Port when nothing
// listens on the IPv4 loopback) inside the sandbox.
type DialArgs struct {
	Port int `json:"port"`
}

// CodeRefused is the error of a dial that found nothing listening on the port.
const CodeRefused = "refused"

// ErrRefused is what Dial returns when nothing listens on the port.
var ErrRefused = errors.New("nothing is listening on the port")

// dialTimeout bounds the agent's answer to a dial.
const dialTimeout = 15 * time.Second

// Dial connects to port on the sandbox's loopback through the agent. The returned
// connection is a stream of the agent's session: closing it closes the connection in
// the sandbox. Nothing listening is ErrRefused.
func (c *Client) Dial(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d is out of range 1-65535", ErrInvalid, port)
	}
	l, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	st, err := l.sess.OpenStream()
	if err != nil {
		c.broken(l, fmt.Errorf("%w: open stream: %v", ErrUnavailable, err))
		return nil, fmt.Errorf("%w: open stream: %v", ErrUnavailable, err)
	}
	args, _ := json.Marshal(DialArgs{Port: port})
	deadline := time.Now().Add(dialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = st.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Now()) })
	defer stop()
	if err := WriteFrame(st, &Header{Op: OpDial, Args: args}, nil); err != nil {
		st.Close()
		return nil, fmt.Errorf("%w: dial port %d: %v", ErrUnavailable, port, err)
	}
	h, _, err := ReadFrame(st)
	if err != nil {
		st.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial port %d: %w", port, ctxErr(ctx))
		}
		return nil, fmt.Errorf("%w: dial port %d: %v", ErrUnavailable, port, err)
	}
	if h.Error != nil {
		st.Close()
		if h.Error.Code == CodeRefused {
			return nil, fmt.Errorf("%w: %s", ErrRefused, h.Error.Message)
		}
		return nil, h.Error
	}
	if !stop() { // ctx ended meanwhile and cut the stream's deadline
		st.Close()
		return nil, fmt.Errorf("dial port %d: %w", port, ctxErr(ctx))
	}
	_ = st.SetDeadline(time.Time{})
	return st, nil
}

// EgressFunc handles one connection a workspace process made to the agent's egress
// proxy. It owns conn.
type EgressFunc func(conn net.Conn)

// WithEgress has the client take the agent's egress streams and hand each to h. It
// must be called before the first call.
func (c *Client) WithEgress(h EgressFunc) *Client {
	c.egress = h
	return c
}

// acceptEgress takes the streams the agent opens on l until l ends.
func (c *Client) acceptEgress(l *link) {
	if l.inbox != nil {
		defer l.inbox.close()
	}
	for {
		st, err := l.sess.AcceptStream()
		if err != nil {
			return
		}
		go c.takeEgress(l, st)
	}
}

func (c *Client) takeEgress(l *link, st *yamux.Stream) {
	_ = st.SetReadDeadline(time.Now().Add(dialTimeout))
	h, _, err := ReadFrame(st)
	if err != nil || h.Op != OpEgress || c.egress == nil {
		st.Close()
		return
	}
	var args EgressArgs
	if len(h.Args) > 0 {
		_ = json.Unmarshal(h.Args, &args)
	}
	if args.Conn == "" {
		_ = st.SetReadDeadline(time.Time{})
		c.egress(st)
		return
	}
	// The agent sent the connection's descriptor ahead of this stream (egressconn.go).
	var conn *net.TCPConn
	if l.inbox != nil {
		conn = l.inbox.claim(args.Conn)
	}
	_ = st.SetWriteDeadline(time.Now().Add(dialTimeout))
	res, _ := json.Marshal(EgressAnswer{Taken: conn != nil})
	werr := WriteFrame(st, &Header{Done: true, Result: res}, nil)
	if conn != nil {
		// Served whether or not the answer got through: an agent that can't read it
		// closes its copy, never pipes it.
		st.Close()
		c.egress(conn)
		return
	}
	if werr != nil {
		st.Close()
		return
	}
	_ = st.SetDeadline(time.Time{})
	c.egress(st)
}

// Where a session uses secrets (their values stay in cws: the proxy puts them into
// requests), the sandbox gets two more variables, which the agent reads and removes
// from its environment:
//   - EnvEgressCA, the PEM certificate of the CA whose leaves the proxy shows for the
//     secrets' hosts: the agent writes the system roots plus it to CABundle and points
//     every command's SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE,
//     CURL_CA_BUNDLE and GIT_SSL_CAINFO at it (CAEnv);
//   - EnvEgressVars, a JSON object of variables every command gets: each secret's
//     placeholder, and git's credential helper (GIT_CONFIG_COUNT/KEY/VALUE).
const (
	EnvEgressCA   = "CWS_EGRESS_CA"
	EnvEgressVars = "CWS_EGRESS_VARS"
)

// CABundle is where the agent writes the bundle of the system roots and the egress CA.
const CABundle = "/tmp/.cws-ca-bundle.pem"

// CAEnv is what points every command at CABundle.
func CAEnv() map[string]string {
	env := map[string]string{}
	for _, k := range []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"} {
		env[k] = CABundle
	}
	return env
}
