package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(`{"maxFileSize": 5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"maxFileSzie": 5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadFiles(map[string]string{"acme": good, "dev": ""})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := got.Policy("acme"); !ok || p.MaxFileSize != 5 {
		t.Fatalf("acme: %+v %v", p, ok)
	}
	if p, ok := got.Policy("dev"); !ok || p.MaxFileSize != Default().MaxFileSize {
		t.Fatalf("dev should get the default policy: %+v %v", p, ok)
	}
	if _, ok := got.Policy("nobody"); ok {
		t.Fatal("an unknown tenant has a policy")
	}
	_, err = LoadFiles(map[string]string{"beta": bad})
	if err == nil || !strings.Contains(err.Error(), "tenant beta") || !strings.Contains(err.Error(), "maxFileSzie") {
		t.Fatalf("got %v, want an error naming the tenant and the field", err)
	}
}
