// Command inventorynode is a meshloc node of your own hosting durable
// warehouses (package inventory) beside the built-in types; it takes every
// flag of meshnode and behaves as meshnode does (meshnode.Main).
//
//	inventorynode --name w1 --listen 127.0.0.1:7300 --http 127.0.0.1:7301
//
// Kill it (kill -9): every acknowledged change is in etcd, and the next call
// re-activates its warehouses on another node that hosts the type.
package main

import (
	"os"

	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/meshnode"

	"example.com/inventory/inventory"
)

func main() {
	os.Exit(meshnode.Main(
		meshnode.Named("inventorynode"),
		meshnode.Register(builtin.Register),
		meshnode.Register(inventory.Register),
	))
}
