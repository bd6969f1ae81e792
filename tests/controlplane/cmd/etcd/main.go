// Command etcd is the etcd server (go.etcd.io/etcd/server/v3/etcdmain) built from
// the version Kubernetes v1.37 is tested with (build/dependencies.yaml: etcd 3.7.0).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
