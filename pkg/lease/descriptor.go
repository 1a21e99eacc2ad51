package lease

import (
	"encoding/json"
	"fmt"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/placement"
)

// NodeState is the lifecycle state an owner advertises.
type NodeState string

// Owner states (docs/design.md §2).
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
	// TLS: the node serves mutual TLS. A node that serves TLS never routes
	// to, nor moves objects to, an owner without it (RequireTLS).
	TLS bool `json:"tls,omitempty"`
	// Full: the node is at its memory limits (--max-objects,
	// --memory-limit) and takes no new object (placement.Candidate.Full).
	Full bool `json:"full,omitempty"`
	// BulkIntents: as a target the node takes bulk moves whose intents
	// are in the bulk's key (the one-write rule, docs/design.md §4). A
	// source moves objects that way only to a node that says so, so a
	// node of an earlier version, during a rolling upgrade, still gets
	// each record's intent.
	BulkIntents bool `json:"bulkIntents,omitempty"`
}

// Encode is the JSON of d.
func (d *Descriptor) Encode() []byte {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return b
}

// DecodeDescriptor parses a stored descriptor: one JSON object (fields it
// does not know are ignored, for descriptors written by newer versions)
// naming a valid owner id (keyspace.ValidateOwnerID). Every error wraps
// ErrInvalidDescriptor; JSON's null, {} and an object without "ownerId"
// are errors, not an empty descriptor.
func DecodeDescriptor(b []byte) (Descriptor, error) {
	var d Descriptor
	if err := json.Unmarshal(b, &d); err != nil {
		return Descriptor{}, fmt.Errorf("%w: %w", ErrInvalidDescriptor, err)
	}
	if err := keyspace.ValidateOwnerID(d.OwnerID); err != nil {
		return Descriptor{}, fmt.Errorf("%w: %w", ErrInvalidDescriptor, err)
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

// Candidate is the owner as placement's rule sees it (placement.Eligible).
// An owner that advertises no address cannot be reached: not serving.
func (o Owner) Candidate() placement.Candidate {
	d := o.Descriptor
	return placement.Candidate{ID: d.OwnerID, Serving: d.State == StateServing && d.Address != "", Weight: d.Weight, Types: d.Types, Version: d.ApplicationVersion, Full: d.Full}
}
