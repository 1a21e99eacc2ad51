package lease

import (
	"encoding/json"
	"fmt"
)

// NodeState is the lifecycle state an owner advertises.
type NodeState string

// Owner states (DESIGN.md §2).
const (
	StateJoining  NodeState = "joining"
	StateServing  NodeState = "serving"
	StateDraining NodeState = "draining"
)

// Descriptor is the value of owners/<ownerId>, bound to the owner's lease.
type Descriptor struct {
	OwnerID            string    `json:"ownerId"`
	RoutingID          string    `json:"routingId"` // 16 bytes, lowercase hex
	Address            string    `json:"address"`
	State              NodeState `json:"state"`
	Weight             int       `json:"weight"`
	ApplicationVersion string    `json:"applicationVersion"`
	Types              []string  `json:"types"`
	StartedUnixMs      int64     `json:"startedUnixMs"`
	HTTP               string    `json:"http,omitempty"` // metrics/health address
}

// Encode is the JSON of d.
func (d *Descriptor) Encode() []byte {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return b
}

// DecodeDescriptor parses a stored descriptor.
func DecodeDescriptor(b []byte) (Descriptor, error) {
	var d Descriptor
	if err := json.Unmarshal(b, &d); err != nil {
		return Descriptor{}, fmt.Errorf("lease: invalid descriptor: %w", err)
	}
	return d, nil
}

// Owner is a live owner as read from etcd.
type Owner struct {
	Descriptor Descriptor
	// Generation is the CreateRevision of the owner key.
	Generation int64
	// ModRevision of the owner key (the CAS version of the descriptor).
	ModRevision int64
	// LeaseID the key is bound to.
	LeaseID int64
}
