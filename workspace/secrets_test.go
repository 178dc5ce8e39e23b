package workspace_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/secrets"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
)

// TestLoadSecretsCA: the first replica makes the CA and every other one, with the same
// key, loads that same CA; a replica started with another key fails closed, saying why.
func TestLoadSecretsCA(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	key, _ := secrets.ParseKey(strings.Repeat("01", 32))
	first, err := workspace.LoadSecretsCA(ctx, store, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	second, err := workspace.LoadSecretsCA(ctx, store, key, time.Now())
	if err != nil || !bytes.Equal(first.CertPEM(), second.CertPEM()) {
		t.Fatalf("a second replica loaded another CA (%v)", err)
	}
	other, _ := secrets.ParseKey(strings.Repeat("02", 32))
	_, err = workspace.LoadSecretsCA(ctx, store, other, time.Now())
	if !errors.Is(err, secrets.ErrKey) || !strings.Contains(err.Error(), "another --secrets-key-file or CWS_SECRETS_KEY") {
		t.Errorf("another key: %v", err)
	}
}
