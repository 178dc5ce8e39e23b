package egress

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// CA is the per-deployment authority that signs the certificates the proxy shows a
// workspace for the hosts whose requests it opens to put a secret in. Only sandboxes
// that use secrets trust it (the agent adds it to their bundle). Leaves are minted
// once per host and cached until a day before they expire.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	leafKey *ecdsa.PrivateKey // one key for every leaf: minting only signs

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
	minted atomic.Int64
}

// leafLife is how long a minted leaf is valid; it is minted again a day before.
const leafLife = 7 * 24 * time.Hour

// NewCA makes a new authority, valid for ten years, and returns it with its
// certificate and key in PEM (to be kept, sealed, for the other replicas).
func NewCA(now time.Time) (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "cws egress secrets CA", Organization: []string{"cws"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	bundle := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})...)
	ca, err := ParseCA(bundle)
	return ca, bundle, err
}

// ParseCA reads what NewCA returned: the certificate and its key, in PEM.
func ParseCA(bundle []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(bundle, bundle)
	if err != nil {
		return nil, fmt.Errorf("the egress CA: %v", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || !cert.IsCA {
		return nil, errors.New("the egress CA: its certificate is not a CA's")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("the egress CA: its key can't sign")
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: signer, leafKey: leafKey, leaves: map[string]*tls.Certificate{},
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// CertPEM is the authority's certificate, which a sandbox trusts.
func (c *CA) CertPEM() []byte { return c.certPEM }

// Minted is how many leaves were minted (not served from the cache).
func (c *CA) Minted() int64 { return c.minted.Load() }

// Leaf returns a certificate for host (a name or an IP), from the cache while it has
// more than a day to live.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if l, ok := c.leaves[host]; ok && now.Add(24*time.Hour).Before(l.Leaf.NotAfter) {
		return l, nil
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, c.leafKey.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("mint a certificate for %s: %v", host, err)
	}
	leaf, _ := x509.ParseCertificate(der)
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: c.leafKey, Leaf: leaf}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves) // a bound, not an LRU: a session reaches few secret hosts
	}
	c.leaves[host] = l
	c.minted.Add(1)
	return l, nil
}

// maxLeaves bounds the leaf cache.
const maxLeaves = 4096
