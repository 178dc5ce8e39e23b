package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"

	"github.com/cwsdev/cws/sandbox/agent"
)

// systemBundles are where images keep their root certificates, as crypto/x509 looks
// for them on Linux.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// egressSecrets adds to env what a session with secrets gives every command (see
// agent.EnvEgressCA): its placeholders and git's credential helper, and a CA bundle of
// the image's roots plus cws's egress CA, which the usual variables point at.
func egressSecrets(log *slog.Logger, env map[string]string) {
	if raw := os.Getenv(agent.EnvEgressVars); raw != "" {
		var vars map[string]string
		if err := json.Unmarshal([]byte(raw), &vars); err != nil {
			log.Warn("unreadable "+agent.EnvEgressVars+": commands get no secret placeholders", "err", err)
		}
		for k, v := range vars {
			env[k] = v
		}
	}
	ca := os.Getenv(agent.EnvEgressCA)
	if ca == "" {
		return
	}
	var bundle bytes.Buffer
	for _, p := range systemBundles {
		if b, err := os.ReadFile(p); err == nil {
			bundle.Write(b)
			if len(b) > 0 && b[len(b)-1] != '\n' {
				bundle.WriteByte('\n')
			}
			break
		}
	}
	bundle.WriteString(ca)
	tmp := agent.CABundle + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, bundle.Bytes(), 0o644); err != nil {
		log.Warn("no CA bundle: HTTPS to a secret's host will fail verification", "path", agent.CABundle, "err", err)
		return
	}
	if err := os.Rename(tmp, agent.CABundle); err != nil {
		log.Warn("no CA bundle: HTTPS to a secret's host will fail verification", "path", agent.CABundle, "err", err)
		return
	}
	for k, v := range agent.CAEnv() {
		env[k] = v
	}
	log.Info("commands trust cws's egress CA besides the image's roots", "bundle", agent.CABundle)
}
