package main

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

func healthcheckCmd(getenv func(string) string) *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 if cws answers on /healthz (for container HEALTHCHECKs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := &http.Client{Timeout: 3 * time.Second}
			resp, err := c.Get(url)
			if err != nil {
				return fmt.Errorf("healthcheck %s: %w", url, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("healthcheck %s: %s", url, resp.Status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", healthURL(envDefault(getenv, "CWS_ADDR", "127.0.0.1:9960")), "health URL to check (default from CWS_ADDR)")
	return cmd
}

// healthURL is /healthz on the listen address, with a wildcard host read as loopback.
func healthURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://127.0.0.1:9960/healthz"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz"
}
