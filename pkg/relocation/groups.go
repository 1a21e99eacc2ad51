package relocation

import (
	"fmt"
	"slices"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Groups and Actor Join (docs/design.md §6).
//
// A group moves as one relocation: the group record is the primary
// participant and every member actor follows it in PREPARE, each with its
// full record. The source writes the intent on every participant in one
// transaction, the target commits every participant in one transaction, and
// a preserve rewrites every participant in one transaction: at no revision
// are members split between owners.
//
// An Actor Join relocates one actor to the node that owns the group it
// joins: PREPARE names the group (JoinGroup) and the target's commit writes
// the membership (the actor's Group, the group's Members) in the same
// transaction as the move.
//
// checkGroups is what the target checks before staging anything: the
// participants form exactly one whole group, or one actor joining a group,
// or one actor that belongs to no group. A member never moves without its
// group.

// checkGroups validates the participant set of a PREPARE; it returns the
// group an Actor Join joins (zero: not a join).
func checkGroups(p *pb.Prepare, parts []record.Snapshot) (keyspace.Object, error) {
	if j := p.GetJoinGroup(); j != "" {
		g, err := keyspace.ParseObject(j)
		if err != nil || g.Kind != keyspace.KindGroup {
			return keyspace.Object{}, fmt.Errorf("%w: join group %q is not a group", ErrProtocol, j)
		}
		if len(parts) != 1 || parts[0].Object.Kind != keyspace.KindActor {
			return keyspace.Object{}, fmt.Errorf("%w: an Actor Join moves exactly one actor", ErrProtocol)
		}
		if parts[0].Record.Group != "" {
			return keyspace.Object{}, fmt.Errorf("%w: %s is a member of %s already", ErrProtocol, parts[0].Object, parts[0].Record.Group)
		}
		return g, nil
	}
	primary := parts[0]
	if primary.Object.Kind != keyspace.KindGroup {
		for _, pp := range parts {
			if pp.Object.Kind == keyspace.KindGroup {
				return keyspace.Object{}, fmt.Errorf("%w: a group participant must come first", ErrProtocol)
			}
			if pp.Record.Group != "" {
				return keyspace.Object{}, fmt.Errorf("%w: %s is a member of %s: it moves with its group", ErrProtocol, pp.Object, pp.Record.Group)
			}
		}
		if len(parts) != 1 {
			return keyspace.Object{}, fmt.Errorf("%w: %d actors without a group", ErrProtocol, len(parts))
		}
		return keyspace.Object{}, nil
	}
	group := primary.Object.String()
	want := slices.Clone(primary.Record.Members)
	slices.Sort(want)
	got := make([]string, 0, len(parts)-1)
	for _, pp := range parts[1:] {
		if pp.Object.Kind != keyspace.KindActor || pp.Record.Group != group {
			return keyspace.Object{}, fmt.Errorf("%w: %s is not a member of %s", ErrProtocol, pp.Object, group)
		}
		got = append(got, pp.Object.String())
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return keyspace.Object{}, fmt.Errorf("%w: %s lists members %v, PREPARE carries %v", ErrProtocol, group, want, got)
	}
	return keyspace.Object{}, nil
}

// RefusedError is a Restored error by which the target's driver refuses the
// stage for a reason of its own (an Actor Join into a group this node does
// not own, or that is busy or full): FAILED carries Code, not DataLost.
type RefusedError struct {
	Code    pb.Code
	Message string
}

func (e *RefusedError) Error() string { return "relocation: refused: " + e.Message }
