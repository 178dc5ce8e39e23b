package workspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/egress"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
)

// The workspace's network edges (DESIGN.md, "Network edges"): both ride the agent's
// connection. Out: the agent hands every connection a workspace process makes to its
// proxy to cws (serveEgress), which applies the session's network policy and dials
// (package egress). In: a preview request opens a connection to a port on the
// sandbox's loopback through the agent (DialPort).

// NetObserver is what an Observer may implement to count the network edges: each
// egress connection (direction "out") and preview connection ("in") with its bytes.
type NetObserver interface {
	NetConn(tenant, direction, decision string, out, in int64)
}

// SecretObserver is what an Observer may implement to count the secrets the egress
// proxy put into requests (outcome "injected") or refused to ("refused"; secret "" for
// a placeholder not of the session).
type SecretObserver interface {
	SecretUse(tenant, secret, outcome string)
}

func netObserver(o Observer) NetObserver {
	if n, ok := o.(NetObserver); ok {
		return n
	}
	return nil
}

// owner is the session a sandbox serves.
type owner struct{ tenant, id string }

// own records which session sandbox serves, for its egress streams.
func (s *Service) own(sess *Session) {
	if sess == nil || sess.Sandbox == "" {
		return
	}
	o := owner{sess.Tenant, sess.ID}
	if v, ok := s.owners.Load(sess.Sandbox); !ok || v.(owner) != o { // every call: a Store allocates
		s.owners.Store(sess.Sandbox, o)
	}
}

// ownerOf finds the session sandboxID serves from the engine's labels, and remembers it.
func (s *Service) ownerOf(sandboxID string) (owner, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	infos, err := s.cfg.Sandboxes.List(ctx, nil)
	if err != nil {
		return owner{}, false
	}
	for _, in := range infos {
		if in.ID == sandboxID && in.Session != "" && in.Tenant != "" && !in.Deleted {
			o := owner{in.Tenant, in.Session}
			s.owners.Store(sandboxID, o)
			return o, true
		}
	}
	return owner{}, false
}

// serveEgress serves one connection a process of sandboxID made to its egress proxy.
func (s *Service) serveEgress(sandboxID string, conn net.Conn) {
	v, ok := s.owners.Load(sandboxID)
	if !ok && s.cfg.Egress != nil {
		// This replica has not looked the session up since it started (or another
		// replica's call started the process): the sandbox's labels say whose it is.
		if o, found := s.ownerOf(sandboxID); found {
			v, ok = o, true
		}
	}
	if !ok || s.cfg.Egress == nil {
		egress.Refuse(conn, 503, "egress: cws does not know this workspace's session yet; try again in a moment")
		conn.Close()
		return
	}
	o := v.(owner)
	s.cfg.Egress.Serve(context.Background(), conn, egress.Target{Tenant: o.tenant, Session: o.id,
		Policy:  func(ctx context.Context) (egress.Policy, error) { return s.egressPolicy(ctx, o.tenant, o.id) },
		Secrets: func(ctx context.Context) ([]egress.Secret, error) { return s.egressSecrets(ctx, o.tenant, o.id) }})
}

// egressPolicy is the network policy in force for a session: its tenant's, narrowed by
// the workspace's .cws-policy.json.
func (s *Service) egressPolicy(ctx context.Context, tenant, id string) (egress.Policy, error) {
	sess, ok := s.sessions.get(tenant, id)
	if !ok {
		var err error
		if sess, err = s.cfg.Store.GetSession(ctx, tenant, id); err != nil {
			return egress.Policy{}, err
		}
	}
	tp, _ := s.cfg.Tenants.Policy(tenant)
	c := &call{svc: s, sess: sess, caller: Caller{Tenant: tenant, Subject: sess.Subject}, agent: s.agentFor(sess.Sandbox), tool: "egress"}
	eff, err := s.effectivePolicy(ctx, c, tp)
	if err != nil {
		return egress.Policy{}, err
	}
	return eff.Egress(), nil
}

// egressRecord audits and counts one egress decision.
func (s *Service) egressRecord(r egress.Record) {
	decision := "allow"
	if r.Decision != "allowed" {
		decision = "deny"
	}
	s.record(AuditRecord{Time: s.cfg.Now().UTC(), Tenant: r.Tenant, Session: r.Session, Tool: "egress",
		Decision: decision, Outcome: r.Decision, Duration: r.Took.Seconds(), Rule: r.Reason,
		Target: net.JoinHostPort(r.Host, strconv.Itoa(r.Port)), BytesOut: r.BytesOut, BytesIn: r.BytesIn, Secrets: strings.Join(r.Secrets, ",")})
	s.noteEgress(r.Tenant, r.Session, r.Decision == "allowed", r.BytesOut, r.BytesIn)
	if n := netObserver(s.obs); n != nil {
		n.NetConn(r.Tenant, "out", r.Decision, r.BytesOut, r.BytesIn)
	}
	if so, ok := s.obs.(SecretObserver); ok {
		for _, name := range r.Secrets {
			outcome := "injected"
			if r.Decision != "allowed" {
				outcome = "refused"
			}
			so.SecretUse(r.Tenant, name, outcome)
		}
	}
	if r.Decision != "allowed" {
		s.log.Info("egress refused", "tenant", r.Tenant, "session", r.Session, "target", net.JoinHostPort(r.Host, strconv.Itoa(r.Port)), "why", r.Reason)
	}
}

// portPolicy finds caller's session id (waking it) and checks that previewPorts allows
// port; a refusal is audited.
func (s *Service) portPolicy(ctx context.Context, caller Caller, id string, port int) (*call, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d is not from 1 to 65535", ErrInvalid, port)
	}
	sess, _, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	tp, _ := s.cfg.Tenants.Policy(caller.Tenant)
	c := &call{svc: s, sess: sess, caller: caller, agent: s.agentFor(sess.Sandbox), tool: "preview"}
	eff, err := s.effectivePolicy(ctx, c, tp)
	if err != nil {
		return nil, err
	}
	if !eff.PreviewAllowed(port) {
		s.record(AuditRecord{Time: s.cfg.Now().UTC(), Tenant: sess.Tenant, Subject: caller.Subject, Session: sess.ID,
			Tool: "preview", Decision: "deny", Outcome: "denied", Rule: "previewPorts", Target: ":" + strconv.Itoa(port)})
		return nil, &policy.Violation{Err: ErrPolicy, Rule: "previewPorts",
			Detail: fmt.Sprintf("port %d is not in the policy's previewPorts", port)}
	}
	return c, nil
}

// ValidPort parses a port of a preview request: 1-65535.
func ValidPort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != s {
		return 0, fmt.Errorf("%w: port %q is not a number from 1 to 65535", ErrInvalid, s)
	}
	return p, nil
}

// DialPort connects to port on the loopback of caller's session id (scope ports),
// waking it if it sleeps. The policy's previewPorts must allow the port (ErrPolicy);
// nothing listening is ErrNoListener. The connection is counted and audited when it
// closes.
func (s *Service) DialPort(ctx context.Context, caller Caller, id string, port int) (net.Conn, error) {
	if err := caller.need(auth.ScopePorts, "reaching a workspace port"); err != nil {
		return nil, err
	}
	start := time.Now()
	target := ":" + strconv.Itoa(port)
	c, err := s.portPolicy(ctx, caller, id, port)
	if err != nil {
		return nil, err
	}
	sess := c.sess
	conn, err := c.agent.Dial(ctx, port)
	if err != nil {
		if errors.Is(err, agent.ErrRefused) {
			return nil, fmt.Errorf("%w: nothing is listening on port %d in session %s", ErrNoListener, port, id)
		}
		if errors.Is(err, agent.ErrInvalid) && strings.Contains(err.Error(), "unknown operation") {
			return nil, fmt.Errorf("%w: the session's agent predates preview ports; a new session has them", ErrIncompatible)
		}
		return nil, mapAgentError(err)
	}
	s.renew(ctx, sess)
	return &countedConn{Conn: conn, done: func(out, in int64) {
		s.record(AuditRecord{Time: s.cfg.Now().UTC(), Tenant: sess.Tenant, Subject: caller.Subject, Session: sess.ID,
			Tool: "preview", Decision: "allow", Outcome: "ok", Duration: time.Since(start).Seconds(), Target: target,
			BytesOut: out, BytesIn: in})
		if n := netObserver(s.obs); n != nil {
			n.NetConn(sess.Tenant, "in", "allowed", out, in)
		}
	}}, nil
}

// DefaultMaxPortConns is Config.MaxPortConns's default: far more than a browser opens
// to one app (about 6, plus its WebSockets), and a bound on what slow readers can make
// cws hold for one session (each exchange up to agent.StreamWindow).
const DefaultMaxPortConns = 64

// HoldPort is CheckPort that also takes one of the session's places for an exchange
// with its ports (a proxied request, a WebSocket, a port-forward tunnel), for as long
// as the exchange lasts: release (once) gives it back. Past Config.MaxPortConns it is
// ErrQuota. Idle connections kept for reuse hold no place: they carry nothing.
func (s *Service) HoldPort(ctx context.Context, caller Caller, id string, port int) (release func(), err error) {
	if err := caller.need(auth.ScopePorts, "reaching a workspace port"); err != nil {
		return nil, err
	}
	c, err := s.portPolicy(ctx, caller, id, port)
	if err != nil {
		return nil, err
	}
	return s.holdPortConn(c.sess)
}

// holdPortConn counts one more exchange with sess's ports, or refuses it past the
// cap; release (once) gives the place back.
func (s *Service) holdPortConn(sess *Session) (release func(), err error) {
	v, _ := s.portConns.LoadOrStore(sess.Sandbox, new(atomic.Int64))
	n := v.(*atomic.Int64)
	limit := cmp.Or(s.cfg.MaxPortConns, DefaultMaxPortConns)
	if n.Add(1) > int64(limit) {
		n.Add(-1)
		return nil, fmt.Errorf("%w: session %s already has %d exchanges open with its ports, the most this server allows (cws serve --preview-max-conns); close some, or retry once they end", ErrQuota, sess.ID, limit)
	}
	var once sync.Once
	return func() { once.Do(func() { n.Add(-1) }) }, nil
}

// countedConn counts bytes each way (out: from the workspace) and reports them once
// when closed.
type countedConn struct {
	net.Conn
	out, in atomic.Int64
	closed  atomic.Bool
	done    func(out, in int64)
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.out.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.done(c.out.Load(), c.in.Load())
	}
	return err
}

// CloseWrite half-closes the connection (a yamux stream's Close is its FIN).
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
