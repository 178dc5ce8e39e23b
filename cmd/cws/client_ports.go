package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cwsdev/cws/api"
)

func portForwardCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	var address string
	cmd := &cobra.Command{
		Use:   "port-forward SESSION PORT[:LOCAL]...",
		Short: "Forward local ports to ports of a session's workspace",
		Long: `Listen on local ports and forward each connection to a port on the workspace's
loopback, through cws (like kubectl port-forward). Any TCP protocol works, not only
HTTP. The token needs the ports scope, and the tenant's policy (previewPorts) must
allow the port. A suspended session wakes on the first connection.

PORT is the workspace's; PORT:LOCAL listens on LOCAL instead of the same number, and
PORT:0 on a free port, printed. Stop with Ctrl-C.

Examples:
  cws port-forward s-abc… 3000              # http://127.0.0.1:3000 is the app on 3000
  cws port-forward s-abc… 8080:18080 5432    # two ports: 18080 → 8080, 5432 → 5432
  cws port-forward s-abc… 3000:0 --address 0.0.0.0`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			id := args[0]
			var ls []net.Listener
			defer func() {
				for _, l := range ls {
					l.Close()
				}
			}()
			for _, spec := range args[1:] {
				remote, local, err := parsePortSpec(spec)
				if err != nil {
					return err
				}
				l, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(local)))
				if err != nil {
					return fmt.Errorf("listen on %s: %w (pick another local port: %d:LOCAL)", net.JoinHostPort(address, strconv.Itoa(local)), err, remote)
				}
				ls = append(ls, l)
				fmt.Fprintf(cmd.OutOrStdout(), "Forwarding from %s -> %d\n", l.Addr(), remote)
				go forwardLoop(cmd.Context(), cmd.ErrOrStderr(), c, id, remote, l)
			}
			<-cmd.Context().Done()
			return nil
		},
	}
	cf.register(cmd.Flags(), getenv)
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "local address to listen on")
	return cmd
}

// parsePortSpec reads PORT (listen on the same number) or PORT:LOCAL (LOCAL 0: any
// free port). PORT is the workspace's.
func parsePortSpec(s string) (remote, local int, err error) {
	r, l, two := strings.Cut(s, ":")
	bad := fmt.Errorf("port %q: want PORT or PORT:LOCAL (the workspace's port first; LOCAL 0 picks a free one), each 1-65535", s)
	if remote, err = strconv.Atoi(r); err != nil || remote < 1 || remote > 65535 {
		return 0, 0, bad
	}
	if !two {
		return remote, remote, nil
	}
	if local, err = strconv.Atoi(l); err != nil || local < 0 || local > 65535 {
		return 0, 0, bad
	}
	return remote, local, nil
}

// forwardLoop accepts local connections and tunnels each to port of session id.
func forwardLoop(ctx context.Context, errw io.Writer, c *client, id string, port int, l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			remote, err := c.tunnel(ctx, id, port)
			if err != nil {
				fmt.Fprintf(errw, "port %d: %v\n", port, err)
				return
			}
			defer remote.Close()
			pipeBoth(conn, remote)
		}()
	}
}

// tunnel opens a raw TCP connection to port of session id (Upgrade: cws-tcp).
func (c *client) tunnel(ctx context.Context, id string, port int) (net.Conn, error) {
	u, err := url.Parse(c.base)
	if err != nil {
		return nil, err
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"https": "443"}[u.Scheme]+map[string]string{"http": "80"}[u.Scheme])
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	var conn net.Conn
	if u.Scheme == "https" {
		conn, err = (&tls.Dialer{NetDialer: &d, Config: &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}}).DialContext(ctx, "tcp", host)
	} else {
		conn, err = d.DialContext(ctx, "tcp", host)
	}
	if err != nil {
		return nil, connError(c.base, err)
	}
	path := strings.TrimSuffix(u.Path, "/") + sessionPath(id, "ports", strconv.Itoa(port)) + "/"
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nUser-Agent: cws-cli\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n",
		path, u.Host, c.token, api.TunnelProtocol)
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute)) // a wake may take a while
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, readAPIError(resp)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return &bufConn{Conn: conn, r: br}, nil
}

// bufConn is a connection whose first bytes may wait in r.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// pipeBoth copies both ways until both are done, passing each end of data on.
func pipeBoth(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(b, a)
		closeWrite(b)
	}()
	_, _ = io.Copy(a, b)
	closeWrite(a)
	wg.Wait()
}

func closeWrite(c net.Conn) {
	if bc, ok := c.(*bufConn); ok {
		c = bc.Conn
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

func portsCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:     "ports",
		Aliases: []string{"port", "preview"},
		Short:   "Preview links to a session's ports",
		Long: `A preview link reaches one port of one session from a browser, with no token: a
signed capability that expires, can be revoked, and dies with its session. With
cws serve --preview-domain it is host-based (https://PORT-SESSION.DOMAIN/), so apps
that use absolute paths work; otherwise it is path-based (/p/CAPABILITY/).

The tenant's policy must allow the port (previewPorts), and the token needs the
ports scope.

Examples:
  cws ports link s-abc… 3000 --ttl 2h
  cws ports revoke s-abc… 3000            # every link of the port
  cws ports revoke s-abc… 3000 --id LINK  # one link`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd.PersistentFlags(), getenv)
	var ttl time.Duration
	link := &cobra.Command{
		Use:   "link SESSION PORT",
		Short: "Make a browser link to a port",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			port, err := portArg(args[1])
			if err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			var out struct {
				ID        string    `json:"id"`
				URL       string    `json:"url"`
				ExpiresAt time.Time `json:"expiresAt"`
			}
			in := map[string]string{}
			if ttl > 0 {
				in["ttl"] = ttl.String()
			}
			if err := c.call(cmd.Context(), http.MethodPost, sessionPath(args[0], "ports", strconv.Itoa(port), "link"), in, &out, nil); err != nil {
				return err
			}
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), out)
			}
			fmt.Fprintln(cmd.OutOrStdout(), out.URL)
			fmt.Fprintf(cmd.ErrOrStderr(), "link %s expires at %s\n", out.ID, out.ExpiresAt.Local().Format(time.RFC3339))
			return nil
		},
	}
	link.Flags().DurationVar(&ttl, "ttl", 0, "how long the link works (default 1h, at most 168h)")
	var linkID string
	revoke := &cobra.Command{
		Use:   "revoke SESSION PORT",
		Short: "Revoke a port's links (all, or --id)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := portArg(args[1])
			if err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			p := sessionPath(args[0], "ports", strconv.Itoa(port), "link")
			if linkID != "" {
				p += "?id=" + url.QueryEscape(linkID)
			}
			if err := c.call(cmd.Context(), http.MethodDelete, p, nil, nil, nil); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "revoked")
			return nil
		},
	}
	revoke.Flags().StringVar(&linkID, "id", "", "revoke only this link")
	cmd.AddCommand(link, revoke)
	return cmd
}

func portArg(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, errors.New("PORT must be a number from 1 to 65535")
	}
	return p, nil
}
