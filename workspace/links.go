package workspace

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cwsdev/cws/auth"
)

// Preview links: a URL that reaches one port of one session from a browser, with no
// token. The link carries a capability: tenant, session, port, expiry and an id, signed
// with a key every replica shares (kept in the Store). It is valid while it has not
// expired, its record is in the session's state (revoking deletes it; deleting the
// session deletes them all) and the port's generation is the one it was made under
// (revoking every link of a port bumps it).

// Link is a preview link as the API shows it.
type Link struct {
	ID        string    `json:"id"`
	Session   string    `json:"session"`
	Port      int       `json:"port"`
	Token     string    `json:"-"` // the capability, for the URL
	ExpiresAt time.Time `json:"expiresAt"`
}

// Limits of a link's time to live.
const (
	DefaultLinkTTL = time.Hour
	MaxLinkTTL     = 7 * 24 * time.Hour
)

type linkClaims struct {
	Tenant  string `json:"t"`
	Session string `json:"s"`
	Port    int    `json:"p"`
	Exp     int64  `json:"e"`
	ID      string `json:"i"`
	Gen     string `json:"g,omitempty"`
}

const linkKeyName = "preview-link-key"

// linkKey is the shared signing key, made by the first replica that needs one.
func (s *Service) linkKey(ctx context.Context) ([]byte, error) {
	if k, ok := s.linkKeyCache.Load().([]byte); ok {
		return k, nil
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	cur, _, err := s.cfg.Store.Claim(ctx, linkKeyName, hex.EncodeToString(b[:]), 0)
	if err != nil {
		return nil, fmt.Errorf("%w: preview link key: %v", ErrUnavailable, err)
	}
	k, err := hex.DecodeString(cur)
	if err != nil || len(k) < 16 {
		return nil, fmt.Errorf("%w: the store's preview link key is malformed", ErrUnavailable)
	}
	s.linkKeyCache.Store(k)
	return k, nil
}

func linkStateKey(id string) string { return "link:" + id }
func linkGenKey(port int) string    { return "linkgen:" + strconv.Itoa(port) }
func sign(key []byte, b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)[:20]
}

// CreateLink makes a preview link to port of caller's session id for ttl (0: the
// default). The port must be one the policy's previewPorts allows.
func (s *Service) CreateLink(ctx context.Context, caller Caller, id string, port int, ttl time.Duration) (*Link, error) {
	if err := caller.need(auth.ScopePorts, "making a preview link"); err != nil {
		return nil, err
	}
	if ttl == 0 {
		ttl = DefaultLinkTTL
	}
	if ttl < time.Second || ttl > MaxLinkTTL {
		return nil, fmt.Errorf("%w: ttl must be from 1s to %s", ErrInvalid, MaxLinkTTL)
	}
	if err := s.CheckPort(ctx, caller, id, port); err != nil {
		return nil, err
	}
	key, err := s.linkKey(ctx)
	if err != nil {
		return nil, err
	}
	gen, err := s.cfg.Store.GetState(ctx, caller.Tenant, id, linkGenKey(port))
	if err != nil {
		return nil, err
	}
	var rid [9]byte
	_, _ = rand.Read(rid[:])
	c := linkClaims{Tenant: caller.Tenant, Session: id, Port: port, Exp: s.cfg.Now().Add(ttl).Unix(),
		ID: base64.RawURLEncoding.EncodeToString(rid[:]), Gen: string(gen)}
	if err := s.cfg.Store.PutState(ctx, caller.Tenant, id, linkStateKey(c.ID), []byte(strconv.FormatInt(c.Exp, 10))); err != nil {
		return nil, err
	}
	payload, _ := json.Marshal(c)
	tok := base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(sign(key, payload))
	return &Link{ID: c.ID, Session: id, Port: port, Token: tok, ExpiresAt: time.Unix(c.Exp, 0).UTC()}, nil
}

// RevokeLinks revokes the link linkID of port of caller's session id, or every link
// of the port when linkID is "".
func (s *Service) RevokeLinks(ctx context.Context, caller Caller, id string, port int, linkID string) error {
	if err := caller.need(auth.ScopePorts, "revoking a preview link"); err != nil {
		return err
	}
	if _, _, err := s.session(ctx, caller, id); err != nil {
		return err
	}
	if linkID != "" {
		return s.cfg.Store.PutState(ctx, caller.Tenant, id, linkStateKey(linkID), nil)
	}
	var g [9]byte
	_, _ = rand.Read(g[:])
	return s.cfg.Store.PutState(ctx, caller.Tenant, id, linkGenKey(port), []byte(hex.EncodeToString(g[:])))
}

// OpenLink checks a link's capability and returns whom it acts for: a caller of the
// link's tenant with the ports scope only, the session and the port. A forged, expired
// or revoked link, or one whose session is gone, is ErrNotFound, like an unknown one.
func (s *Service) OpenLink(ctx context.Context, token string) (Caller, string, int, error) {
	notFound := fmt.Errorf("preview link: %w", ErrNotFound)
	p, m, ok := strings.Cut(token, ".")
	if !ok || len(token) > 2048 {
		return Caller{}, "", 0, notFound
	}
	payload, ok1 := decodeCanonical(p)
	mac, ok2 := decodeCanonical(m)
	if !ok1 || !ok2 {
		return Caller{}, "", 0, notFound
	}
	key, err := s.linkKey(ctx)
	if err != nil {
		return Caller{}, "", 0, err
	}
	if !hmac.Equal(mac, sign(key, payload)) {
		return Caller{}, "", 0, notFound
	}
	var c linkClaims
	if json.Unmarshal(payload, &c) != nil || s.cfg.Now().Unix() >= c.Exp || !validSessionID(c.Session) {
		return Caller{}, "", 0, notFound
	}
	rec, err := s.cfg.Store.GetState(ctx, c.Tenant, c.Session, linkStateKey(c.ID))
	if err != nil || rec == nil {
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Caller{}, "", 0, err
		}
		return Caller{}, "", 0, notFound
	}
	gen, err := s.cfg.Store.GetState(ctx, c.Tenant, c.Session, linkGenKey(c.Port))
	if err != nil || string(gen) != c.Gen {
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Caller{}, "", 0, err
		}
		return Caller{}, "", 0, notFound
	}
	return Caller{Tenant: c.Tenant, Subject: "link:" + c.ID, Scopes: []string{auth.ScopePorts}}, c.Session, c.Port, nil
}

// decodeCanonical decodes s, unpadded base64url, only if s is how the bytes are
// encoded: a capability has one spelling. The decoder alone would also take a last
// character whose unused low bits are set, and line breaks anywhere.
func decodeCanonical(s string) ([]byte, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || base64.RawURLEncoding.EncodeToString(b) != s {
		return nil, false
	}
	return b, true
}

// CheckPort reports whether caller may reach port of session id now: the session is
// the caller's and usable (it is woken if it sleeps), and previewPorts allows the port.
func (s *Service) CheckPort(ctx context.Context, caller Caller, id string, port int) error {
	if err := caller.need(auth.ScopePorts, "reaching a workspace port"); err != nil {
		return err
	}
	_, err := s.portPolicy(ctx, caller, id, port)
	return err
}
