// Package secrets keeps a tenant's credentials sealed and names the placeholders a
// workspace sees in their stead: the key that seals them (AES-256-GCM), the rules for
// names and values, and the placeholder's form. The egress proxy puts a value where its
// session's placeholder stands, for the secret's hosts only (package egress).
//
// The package depends on nothing else of cws.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MaxValueBytes is the largest secret value.
const MaxValueBytes = 64 << 10

// KeyBytes is the key's length: 32 random bytes, given hex-encoded.
const KeyBytes = 32

// HowToSetKey is what a deployment without a key is told.
const HowToSetKey = "secrets need a key: start cws serve with --secrets-key-file FILE or CWS_SECRETS_KEY set to 32 random bytes, hex-encoded (openssl rand -hex 32)"

// ErrKey: a sealed value does not open with this key (another key sealed it, or it was
// changed).
var ErrKey = errors.New("the secret does not open with this server's secrets key (was cws restarted with another --secrets-key-file or CWS_SECRETS_KEY?)")

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	envRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	// placeholderRE is any placeholder, this session's or not.
	placeholderRE = regexp.MustCompile(`cws-secret-[A-Za-z0-9_]{1,64}-[a-z2-7]{26}`)
)

// ValidName reports whether name is a secret's name: [A-Za-z0-9_.-]{1,64}.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// ValidEnv reports whether env may carry a placeholder: a shell variable name of up to
// 64 characters.
func ValidEnv(env string) bool { return envRE.MatchString(env) }

// NameRule and EnvRule describe ValidName and ValidEnv, for error messages.
const (
	NameRule = "[A-Za-z0-9_.-]{1,64}"
	EnvRule  = "[A-Za-z_][A-Za-z0-9_]{0,63}"
)

var placeholderEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewPlaceholder returns a fresh placeholder for env: cws-secret-ENV-<26 random
// base32 characters> (130 bits), unique to one session and useless anywhere else.
func NewPlaceholder(env string) string {
	var b [17]byte
	_, _ = rand.Read(b[:])
	return "cws-secret-" + env + "-" + placeholderEncoding.EncodeToString(b[:])[:26]
}

// FindPlaceholders returns every placeholder in s, this session's or another's.
func FindPlaceholders(s string) []string {
	if !strings.Contains(s, "cws-secret-") {
		return nil
	}
	return placeholderRE.FindAllString(s, -1)
}

// Key seals and opens values with AES-256-GCM.
type Key struct{ aead cipher.AEAD }

// ParseKey reads a hex-encoded 32-byte key (surrounding space ignored).
func ParseKey(hexKey string) (*Key, error) {
	b, err := hex.DecodeString(strings.TrimSpace(hexKey))
	if err != nil || len(b) != KeyBytes {
		return nil, fmt.Errorf("a secrets key is %d random bytes, hex-encoded (%d hex digits; openssl rand -hex 32)", KeyBytes, 2*KeyBytes)
	}
	block, _ := aes.NewCipher(b)
	aead, _ := cipher.NewGCM(block)
	return &Key{aead: aead}, nil
}

// Seal encrypts value, bound to context (the tenant and the secret's name, so that a
// sealed value can't be moved to another), with a fresh nonce in front.
func (k *Key) Seal(value []byte, context string) []byte {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(value)+k.aead.Overhead())
	_, _ = rand.Read(nonce)
	return k.aead.Seal(nonce, nonce, value, []byte(context))
}

// Open decrypts what Seal made with the same context; anything else is ErrKey.
func (k *Key) Open(sealed []byte, context string) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n+k.aead.Overhead() {
		return nil, ErrKey
	}
	v, err := k.aead.Open(nil, sealed[:n], sealed[n:], []byte(context))
	if err != nil {
		return nil, ErrKey
	}
	return v, nil
}
