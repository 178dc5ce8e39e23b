// Command coredns is the cluster DNS of the cws-kube cluster (scripts/kube.sh): CoreDNS
// with only the plugins a cluster DNS needs, built from the Go module proxy because no
// image registry is reachable here. scripts/kube.sh runs it on the host (port 1053 of
// the host's address) behind the kube-dns Service, 10.96.0.10:53.
//
// The plugins are registered by importing them; the Corefile's directives are checked
// against (and ordered by) CoreDNS's own list, dnsserver.Directives.
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
