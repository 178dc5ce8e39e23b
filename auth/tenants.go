package auth

import (
	"crypto/rand"
	"fmt"
	"slices"
)

// DefaultAudience is the aud a tenant's tokens carry unless the tenants file
// says otherwise.
const DefaultAudience = "cws"

// The dev tenant made by [NewDevTenants].
const (
	DevTenantID = "dev"
	DevIssuer   = "cws-dev"
	DevKeyID    = "dev"
)

// Tenant is one platform whose agents may use cws.
type Tenant struct {
	ID         string // stable id: the tenant claim, container labels, store keys
	Issuer     string // tokens' iss must equal it
	Audience   string // tokens' aud must include it; DefaultAudience unless set
	PolicyFile string // absolute path of the tenant's .cws-policy.json; "" when none is set
	Keys       []Key  // static keys from the tenants file
	JWKSURL    string // where more keys are fetched; "" when none
	// DefaultScopes are granted to a token without a scope claim: [AllScopes] unless
	// the tenants file sets defaultScopes. Empty means such tokens may do nothing.
	DefaultScopes []string
}

// Tenants is the loaded tenants file. It is immutable and safe for concurrent use.
type Tenants struct {
	list     []*Tenant // sorted by ID
	byID     map[string]*Tenant
	byIssuer map[string]*Tenant
}

func newTenants(list []*Tenant) *Tenants {
	ts := &Tenants{
		list:     slices.Clone(list),
		byID:     make(map[string]*Tenant, len(list)),
		byIssuer: make(map[string]*Tenant, len(list)),
	}
	slices.SortFunc(ts.list, func(a, b *Tenant) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	for _, t := range ts.list {
		ts.byID[t.ID] = t
		ts.byIssuer[t.Issuer] = t
	}
	return ts
}

// Get returns the tenant with id, or nil.
func (ts *Tenants) Get(id string) *Tenant { return ts.byID[id] }

// List returns all tenants sorted by id.
func (ts *Tenants) List() []*Tenant { return slices.Clone(ts.list) }

// Issuers returns every tenant's issuer, in tenant order.
func (ts *Tenants) Issuers() []string {
	out := make([]string, 0, len(ts.list))
	for _, t := range ts.list {
		out = append(out, t.Issuer)
	}
	return out
}

// byIss returns the tenant whose issuer is iss, or nil.
func (ts *Tenants) byIss(iss string) *Tenant { return ts.byIssuer[iss] }

// ownerOfKID returns a tenant other than except that has a static key kid, or nil.
func (ts *Tenants) ownerOfKID(kid, except string) *Tenant {
	for _, t := range ts.list {
		if t.ID == except {
			continue
		}
		if _, ok := t.key(kid); ok {
			return t
		}
	}
	return nil
}

// key returns the tenant's static key kid.
func (t *Tenant) key(kid string) (Key, bool) {
	for _, k := range t.Keys {
		if k.ID == kid {
			return k, true
		}
	}
	return Key{}, false
}

// NewDevTenants returns the single-tenant set used for local development:
// tenant "dev", issuer "cws-dev", audience "cws", and one HS256 key "dev" with
// a fresh random 32-byte secret, which it also returns so tokens can be minted.
func NewDevTenants() (*Tenants, []byte) {
	secret := make([]byte, MinSecretSize)
	_, _ = rand.Read(secret) // crypto/rand.Read never fails (Go 1.24+)
	ts, err := DevTenants(secret)
	if err != nil {
		panic(fmt.Sprintf("auth: dev tenants: %v", err)) // unreachable: the secret is long enough
	}
	return ts, secret
}

// DevTenants is [NewDevTenants] with a given secret (at least MinSecretSize
// bytes), so several processes can share one dev secret.
func DevTenants(secret []byte) (*Tenants, error) {
	key := Key{ID: DevKeyID, Alg: AlgHS256, Tenant: DevTenantID, Source: "dev secret", material: slices.Clone(secret)}
	if err := checkMaterial(AlgHS256, key.material); err != nil {
		return nil, fmt.Errorf("dev tenant: %w", err)
	}
	return newTenants([]*Tenant{{
		ID:            DevTenantID,
		Issuer:        DevIssuer,
		Audience:      DefaultAudience,
		Keys:          []Key{key},
		DefaultScopes: AllScopes(),
	}}), nil
}

// PolicyFiles maps each tenant id to its policy file (empty when it names none).
func (ts *Tenants) PolicyFiles() map[string]string {
	out := map[string]string{}
	for _, t := range ts.List() {
		out[t.ID] = t.PolicyFile
	}
	return out
}
