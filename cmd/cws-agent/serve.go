package main

import (
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
	"github.com/cwsdev/cws/sandbox/agent/server/keep"
	"github.com/cwsdev/cws/version"
)

// warmThreads is how many OS threads the agent creates up front. Under a fork bomb the
// pids limit leaves no room for new threads, and a Go program that cannot create one
// dies; threads made early are kept and reused, so the agent keeps answering.
const warmThreads = 12

func runServe(args []string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "cws-agent")
	// Before anything else: no capability init passed on may reach a process serve starts.
	if err := clearInheritable(); err != nil {
		return err
	}
	keep.WarmThreads(warmThreads)
	followCPULimit()
	// What init handed over (handoff.go): in same-uid mode the secrets, through a pipe;
	// the listeners it holds.
	in, err := takeInherited()
	if err != nil {
		return err
	}
	// The secret of the socket path: read once, and gone from the environment so that
	// nothing this process starts can inherit it (commands get a built environment anyway).
	secret := os.Getenv(agent.EnvSecret)
	os.Unsetenv(agent.EnvSecret)
	var fenced []string
	if in.sameUID {
		useRunDirState() // as init did
		secret = in.secrets.Secret
		// The keeper runs as this same uid: it and serve prove its key to each other.
		keep.SetKey([]byte(in.secrets.KeeperKey))
	}
	root := os.Getenv("CWS_WORKSPACE")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if in.sameUID {
		// Nothing a tool process writes can reach what serve reads back or runs: its
		// binary and launcher, its socket directory and the state in it.
		fenced = []string{filepath.Dir(self), agent.RunDir}
	}
	// A sandbox with no network device of its own reaches out only through the egress
	// proxy, which every command is pointed at (agent.EnvEgress).
	var baseEnv map[string]string
	var el net.Listener
	if os.Getenv(agent.EnvEgress) == "proxy" {
		if el, err = net.Listen("tcp", agent.EgressProxyAddr); err != nil {
			log.Warn("no egress proxy: commands have no way out", "addr", agent.EgressProxyAddr, "err", err)
			el = nil
		} else {
			baseEnv = agent.ProxyEnv()
			egressSecrets(log, baseEnv)
		}
	}
	os.Unsetenv(agent.EnvEgressCA)
	os.Unsetenv(agent.EnvEgressVars)
	srv, err := server.New(server.Config{Root: root, Version: version.Version, Log: log, Launcher: self,
		StateDir: requestsDir(), ProcDir: procDir(), SameUID: in.sameUID, Fenced: fenced, BaseEnv: baseEnv})
	if err != nil {
		return err
	}
	if abi := srv.Landlock(); abi > 0 {
		log.Info("command allowlists are enforced with Landlock", "landlock_abi", abi)
	} else {
		log.Warn("Landlock is unavailable: commands of a policy with allowedCommands run unenforced (or are refused under requireLandlock)")
	}
	if in.sameUID {
		resetStateModes(log)
		if !srv.Fenced() {
			log.Warn("same-uid mode without the write fence: the agent's state in " + agentStateDir + " is writable by tool processes")
		}
		if scoped, err := srv.Scoped(); scoped {
			log.Info("same-uid mode: every tool process starts in a Landlock domain of its own, scoped for signals and abstract sockets", "uid", os.Geteuid())
		} else {
			log.Warn("same-uid mode WITHOUT Landlock scopes: the agent shares the tools' uid and nothing keeps them from signalling or tracing it", "err", err)
		}
	}
	l := in.unix
	if l == nil {
		if l, err = net.Listen("unix", socketName); err != nil {
			return err
		}
	}
	l = peerListener{l.(*net.UnixListener), log}
	log.Info("agent listening", "socket", socketName, "uid", os.Getuid(), "version", version.Version)
	sl := listenRunDir(log, secret)
	tl := in.tcp
	if tl == nil && secret != "" && os.Getenv(agent.EnvListen) != "" {
		// No init held it (a serve started by hand): listen here.
		if tl, err = net.Listen("tcp", os.Getenv(agent.EnvListen)); err != nil {
			log.Warn("not listening on TCP", "addr", os.Getenv(agent.EnvListen), "err", err)
			tl = nil
		}
	}
	// The socket and the state directory are the agent's own; from here on every
	// thread opens files as the tool user (package ident).
	if err := actAsTool(log, in.sameUID); err != nil {
		return err
	}
	for _, ln := range []net.Listener{sl, tl} {
		if ln == nil {
			continue
		}
		if ln == tl {
			log.Info("agent listening on TCP, behind the secret handshake", "addr", tl.Addr().String())
		}
		go func() {
			if err := srv.ServeSecret(ln, []byte(secret)); err != nil {
				log.Warn("agent socket stopped", "addr", ln.Addr().String(), "err", err)
			}
		}()
	}
	if el != nil {
		log.Info("egress proxy listening; connections go through cws", "addr", agent.EgressProxyAddr)
		go func() {
			if err := srv.ServeEgress(el); err != nil {
				log.Warn("egress proxy stopped", "err", err)
			}
		}()
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		l.Close()
		if sl != nil {
			sl.Close()
		}
		if tl != nil {
			tl.Close()
		}
		srv.Close()
	}()
	return srv.Serve(l)
}

// listenRunDir listens on the socket of the host's direct path (agent.RunDir, mounted
// by the driver) when the container has one and a secret for it; nil otherwise, and
// the host uses the docker exec path.
func listenRunDir(log *slog.Logger, secret string) net.Listener {
	if secret == "" {
		return nil
	}
	if fi, err := os.Stat(agent.RunDir); err != nil || !fi.IsDir() {
		return nil
	}
	path := filepath.Join(agent.RunDir, agent.SocketName)
	// A socket left by a previous serve (killed, then restarted by init) would make
	// the bind fail; whatever else sits at that name goes too.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("agent socket: remove stale entry", "path", path, "err", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		log.Warn("agent socket: not listening, the host will use docker exec", "path", path, "err", err)
		return nil
	}
	// Anyone who may reach the host's directory may connect (cws may run as another
	// uid than the tool's); the secret handshake decides who is served.
	if err := os.Chmod(path, 0o666); err != nil {
		log.Warn("agent socket: chmod", "path", path, "err", err)
	}
	log.Info("agent listening", "socket", path)
	return l
}

// resetStateModes gives every directory and file of the agent's state its mode back
// (0700, 0600). In same-uid mode the tools' fence keeps them from writing there, but
// Landlock has no right for chmod: a tool may have changed a mode to lock the agent out
// of its own records.
func resetStateModes(log *slog.Logger) {
	_ = filepath.WalkDir(agentStateDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// Unreadable (a mode taken away): give it back, then walk on.
			_ = os.Chmod(p, 0o700)
			return nil
		}
		mode := os.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		}
		if d.Type()&fs.ModeSymlink == 0 {
			if err := os.Chmod(p, mode); err != nil {
				log.Warn("agent state: reset mode", "path", p, "err", err)
			}
		}
		return nil
	})
}
