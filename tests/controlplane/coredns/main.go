// Command coredns is the cluster DNS of the test suite's nodes: CoreDNS v1.15.0 built with only the
// plugins a cluster DNS needs, rather than the ~60 of the release build (core/plugin, not imported
// here, would pull in every plugin and its cloud SDKs). This is CoreDNS's documented way to build
// with a subset: register the directives in execution order, import those plugins, run coremain.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

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
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives is the subset of CoreDNS v1.15.0's plugin.cfg, in its order: the order in which the
// plugins see a query, whatever their order in the Corefile. A Corefile directive not listed here
// is rejected at startup ("Unknown directive"). bind keeps it off the host's other addresses.
var directives = []string{
	"reload",
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func init() {
	if err := dnsserver.SetDirectives(directives); err != nil {
		panic(err)
	}
}

func main() {
	coremain.Run()
}
