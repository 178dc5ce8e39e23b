package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/egress"
	"github.com/cwsdev/cws/metrics"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/sandbox/pool"
	"github.com/cwsdev/cws/snapshot"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/redisstore"
	"github.com/cwsdev/cws/workspace/toolset"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// The metrics count what the service observes beyond its Observer.
var (
	_ workspace.NetObserver      = (*metrics.Metrics)(nil)
	_ workspace.UsageObserver    = (*metrics.Metrics)(nil)
	_ workspace.TerminalObserver = (*metrics.Metrics)(nil)
)

func serveCmd(getenv func(string) string) *cobra.Command {
	var cfg Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the cws server",
		Long: `Run the cws server: MCP at /mcp, REST at /v1, metrics at /metrics.

With --driver docker (the default) it needs a Docker engine (DOCKER_HOST or the local
socket) and the workspace image (make images). With --driver kubernetes it runs a pod
per session in --kube-namespace of the cluster its kubeconfig (or in-cluster config)
names. Without --redis-url it keeps sessions in memory (one node only).

Examples:
  cws serve --dev
  cws serve --tenants /etc/cws/tenants.yaml --redis-url redis://redis:6379/0 --addr 0.0.0.0:9960
  cws serve --dev --driver kubernetes --kubeconfig ~/.cache/cws-kube/kubeconfig --kube-namespace cws-sessions`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.validate(); err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cfg.flags(cmd.Flags(), getenv)
	return cmd
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// loadTenants reads the tenants file and each tenant's policy, or makes the dev tenant.
func loadTenants(cfg Config) (*auth.Tenants, policy.ByTenant, []byte, error) {
	if cfg.TenantsFile == "" {
		ts, secret := auth.NewDevTenants()
		return ts, policy.ByTenant{auth.DevTenantID: policy.Default()}, secret, nil
	}
	ts, err := auth.LoadTenants(cfg.TenantsFile)
	if err != nil {
		return nil, nil, nil, err
	}
	pols, err := policy.LoadFiles(ts.PolicyFiles())
	return ts, pols, nil, err
}

func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	tenants, pols, devSecret, err := loadTenants(cfg)
	if err != nil {
		return err
	}
	if cfg.AdminTenant != "" && tenants.Get(cfg.AdminTenant) == nil {
		return fmt.Errorf("--admin-tenant %q: no such tenant in the tenants file (known: %v)", cfg.AdminTenant, pols.TenantIDs())
	}

	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{Version: version.Version, Commit: version.Commit})

	var store workspace.Store
	if cfg.RedisURL != "" {
		rs, err := redisstore.Open(ctx, cfg.RedisURL)
		if err != nil {
			return fmt.Errorf("redis %s: %w (is it running? for one node, drop --redis-url to use the embedded store)", cfg.RedisURL, err)
		}
		store = rs
		log.Info("session store: redis", "url", redactURL(cfg.RedisURL))
	} else {
		store = memstore.New()
		log.Info("session store: embedded in-memory store (single node; sessions are re-adopted from container labels on restart)")
	}
	defer store.Close()
	// Every store operation has a short deadline: a frozen store fails calls fast and
	// retryably. Its health is exported as cws_store_up and shown by /readyz.
	store = workspace.BoundStore(store, cfg.StoreTimeout, func(up bool, failure string) {
		m.StoreHealth(up)
		if !up {
			m.StoreFailure(failure)
		}
	})

	var images []string
	for _, p := range cfg.pools {
		images = append(images, p.Image)
	}
	poolMetrics := metrics.NewPool(reg, images, pool.MissReasons)
	driver, err := newDriver(ctx, cfg, log, poolMetrics)
	if err != nil {
		return err
	}
	defer driver.Close()

	var snaps *snapshot.Store
	if cfg.SnapshotStore != "none" {
		b, err := snapshot.Open(ctx, cfg.SnapshotStore, os.Getenv)
		switch {
		case err == nil:
			snaps = snapshot.NewStore(b)
			log.Info("snapshot store", "store", b.String())
		case !cfg.snapshotStoreSet:
			// The default directory, where this process may not write (a read-only
			// root): go on without, and say how to have one.
			log.Warn("no snapshot store: the default directory is not usable; snapshots and archiving are off (set --snapshot-store)", "err", err)
		default:
			return fmt.Errorf("%w (or --snapshot-store none to run without snapshots)", err)
		}
	} else {
		log.Warn("no snapshot store (--snapshot-store none): snapshots and archiving are off")
	}
	proxy := newEgressProxy(cfg, log)
	if cfg.secretsKey != nil {
		// The CA every replica shows for secrets' hosts, kept sealed in the store.
		if proxy.CA, err = workspace.LoadSecretsCA(ctx, store, cfg.secretsKey, time.Now()); err != nil {
			log.Error("secrets can't be put into requests: the egress CA is unavailable; sessions asking for secrets are refused", "err", err)
		} else {
			log.Info("secrets on: values sealed with the secrets key, put into requests by the egress proxy")
		}
	} else {
		log.Info("secrets off (no --secrets-key-file or CWS_SECRETS_KEY): the secrets API answers 501")
	}
	svc := workspace.New(workspace.Config{Egress: proxy, MaxPortConns: cfg.PreviewMaxConns, AdminTenant: cfg.AdminTenant, UsageEvery: cfg.UsageEvery, Tools: toolset.All(), Diff: toolset.Diff, Store: store, Sandboxes: driver, Tenants: pols, Observer: m, Log: log, DefaultImage: cfg.DefaultImage,
		SessionCacheSize: cacheSize(cfg.SessionCacheSize), RenewFlush: cfg.RenewFlush, LocalReads: localReads(cfg.LocalReads, transportName(driver), log),
		SecretsKey: cfg.secretsKey, DefaultIdleTTL: cfg.SessionTTL, DefaultMaxLife: cfg.MaxLifetime, SuspendAfter: cfg.SuspendAfter, ArchiveAfter: cfg.ArchiveAfter, Snapshots: snaps})
	defer svc.Close()
	var tools []string
	for _, t := range svc.Catalog().Tools() {
		tools = append(tools, t.Name)
	}
	m.Init(tools, workspace.Outcomes, workspace.DenialRules, auth.Reasons)

	verifier := auth.NewVerifier(tenants, auth.VerifierOptions{Logger: log, TokenCacheSize: cacheSize(cfg.TokenCacheSize)})
	mcpHandler := mcp.New(mcp.Config{Service: svc, Verifier: verifier, Tenants: pols, Log: log,
		ResourceMetadataURL: cfg.PublicURL + auth.WellKnownPath, OnAuthFailure: m.AuthFailure, OnCallFailed: m.MCPCallFailed})
	ready := func(ctx context.Context) error {
		if err := store.Ping(ctx); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if _, err := driver.List(ctx, map[string]string{"cws.readyz": "probe"}); err != nil {
			return fmt.Errorf("%s: %w", cfg.Driver, err)
		}
		return nil
	}
	srv := api.New(api.Config{Service: svc, Verifier: verifier, MCP: mcpHandler, Metrics: m, Gatherer: reg, Ready: ready,
		Log: log, PublicURL: cfg.PublicURL, Issuers: tenants.Issuers(), PreviewDomain: cfg.PreviewDomain})

	if err := ready(ctx); err != nil {
		return fmt.Errorf("not ready: %w (run `cws doctor` for help)", err)
	}
	if err := svc.Reconcile(ctx); err != nil {
		log.Warn("startup reconcile", "err", err)
	}
	if d, ok := driver.(*docker.Driver); ok {
		if _, err := d.PruneSocketDirs(ctx); err != nil {
			log.Warn("startup: prune agent socket directories", "err", err)
		}
	}
	reapCtx, stopReaper := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReaper()
	go svc.RunReaper(reapCtx, cfg.ReapEvery)
	go driver.RunPool(reapCtx)
	if len(cfg.pools) > 0 {
		log.Info("warm pool", "pools", cfg.pools, "max", cfg.PoolMax)
	}

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another cws running? pick another --addr)", cfg.Addr, err)
	}
	inflight := &inFlight{next: srv}
	hs := &http.Server{Handler: inflight, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("cws listening", "addr", ln.Addr().String(), "public_url", cfg.PublicURL, "version", version.Version, "tenants", len(pols))
	if devSecret != nil {
		if err := printDev(stdout, tenants, cfg.PublicURL); err != nil {
			return err
		}
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Shutdown: readiness goes 503 at once while the listener stays open (load
	// balancers see it and stop sending), in-flight calls finish within the grace
	// period, then the server closes. Sandboxes, their background processes and the
	// sessions outlive the process: a restarted cws picks them up again.
	srv.Drain()
	log.Info("shutting down: not ready; letting in-flight calls finish", "in_flight", inflight.count(), "grace", cfg.DrainTimeout)
	graceEnd := time.Now().Add(cfg.DrainTimeout)
	inflight.wait(graceEnd)
	sctx, cancel := context.WithDeadline(context.Background(), graceEnd)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("grace period over, closing the remaining connections", "in_flight", inflight.count(), "err", err)
		_ = hs.Close()
	}
	stopReaper()
	log.Info("stopped; sandboxes keep running")
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// printDev prints the dev tenant's token and the MCP URL, ready to paste.
func printDev(w io.Writer, tenants *auth.Tenants, base string) error {
	t := tenants.Get(auth.DevTenantID)
	tok, err := t.Mint("dev", 24*time.Hour, "", nil, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(w, `
cws %s is running (dev mode: tenant %q, in-memory sessions).

  MCP URL:  %s/mcp
  Token:    %s
  Console:  %s/console (sign in with the token)

Connect an MCP client, e.g.:
  claude mcp add --transport http cws %s/mcp --header "Authorization: Bearer %s"

Or use REST:
  curl -H "Authorization: Bearer $TOKEN" -X POST %s/v1/sessions

The token is valid for 24 h. Stop with Ctrl-C (workspace containers keep running).

`, version.Version, auth.DevTenantID, base, tok, base, base, tok, base)
	return nil
}

func redactURL(u string) string {
	if i := indexAt(u); i >= 0 {
		return "redis://…" + u[i:]
	}
	return u
}

func indexAt(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '@' {
			return i
		}
	}
	return -1
}

// localReads is the opener of local reads, or nil when they are off or this process
// cannot take the agents' identity (then it says so once).
func localReads(on bool, transport string, log *slog.Logger) agent.LocalOpener {
	switch {
	case !on:
		log.Info("local reads off (--local-reads=false): every read goes to the agent")
		return nil
	case transport != docker.TransportSocket:
		return nil
	}
	if err := server.LocalReadsAvailable(); err != nil {
		log.Info("local reads off: every read goes to the agent", "why", err, "hint", "run cws as root for reads that skip the agent, or set --local-reads=false")
		return nil
	}
	log.Info("local reads on: readFile and stat are answered through each agent's workspace root")
	return server.OpenLocal
}

func transportName(d engine) string {
	name, _ := d.Transport()
	return name
}

// newEgressProxy is the workspaces' egress proxy: the private-address refusal with the
// operator's exceptions, and cws's own listener among the refused addresses.
func newEgressProxy(cfg Config, log *slog.Logger) *egress.Proxy {
	var allow, deny []netip.Prefix
	for _, s := range cfg.EgressAllowPrivate {
		p, _ := egress.ParsePrefix(s) // validated with the flags
		allow = append(allow, p)
	}
	for _, s := range cfg.EgressDeny {
		p, _ := egress.ParsePrefix(s)
		deny = append(deny, p)
	}
	// cws's own listener is never a destination, even where private ranges are allowed.
	var self []netip.AddrPort
	if host, port, err := net.SplitHostPort(cfg.Addr); err == nil {
		pn, _ := strconv.Atoi(port)
		ips := ownAddrs()
		if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
			ips = []netip.Addr{ip.Unmap()}
		}
		for _, ip := range ips {
			self = append(self, netip.AddrPortFrom(ip, uint16(pn)))
		}
	}
	if len(allow) > 0 {
		log.Info("egress proxy may reach these private ranges", "ranges", cfg.EgressAllowPrivate)
	}
	hosts := map[string][]netip.Addr{}
	for _, r := range cfg.EgressResolve {
		name, ip, _ := parseResolve(r) // validated with the flags
		hosts[name] = append(hosts[name], ip)
	}
	return &egress.Proxy{Guard: egress.NewGuard(allow, deny), IdleTimeout: cfg.EgressIdle, Self: self, Hosts: hosts}
}

// ownAddrs are this host's interface addresses.
func ownAddrs() []netip.Addr {
	var out []netip.Addr
	as, _ := net.InterfaceAddrs()
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
