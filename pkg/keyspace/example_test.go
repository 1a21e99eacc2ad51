package keyspace_test

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Object names, and the etcd keys meshloc keeps for them.
func ExampleParseObject() {
	obj, err := keyspace.ParseObject("actor/cart/alice")
	if err != nil {
		panic(err)
	}
	fmt.Println(obj.Kind, obj.Type, obj.ID)
	fmt.Println(keyspace.Default().Authority(obj))
	_, err = keyspace.ParseObject("actor/cart/../bob")
	fmt.Println(err != nil)
	// Output:
	// actor cart alice
	// /meshloc/default/authority/actor/cart/alice
	// true
}
