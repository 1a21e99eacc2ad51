// Package groupcmd checks the names of a node's group commands
// (AdminService CreateGroup, JoinGroup, LeaveGroup) and describes a group
// in their answers: what a group command is, apart from how a node carries
// it out.
package groupcmd

import (
	"fmt"
	"sync"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Parse checks the names of a GroupCommand.
func Parse(c *pb.GroupCommand, needActor bool) (group, actor keyspace.Object, err error) {
	group, err = keyspace.ParseObject(c.GetGroup())
	if err != nil {
		return group, actor, err
	}
	if group.Kind != keyspace.KindGroup {
		return group, actor, fmt.Errorf("%w: %q is not a group (want group/<id>)", keyspace.ErrInvalidName, c.GetGroup())
	}
	if !needActor {
		if c.GetActor() != "" {
			return group, actor, fmt.Errorf("%w: create takes no actor", authority.ErrInvalidRequest)
		}
		return group, actor, nil
	}
	actor, err = keyspace.ParseObject(c.GetActor())
	if err != nil {
		return group, actor, err
	}
	if actor.Kind != keyspace.KindActor {
		return group, actor, fmt.Errorf("%w: %q is not an actor (want actor/<type>/<id>): groups do not nest", keyspace.ErrInvalidName, c.GetActor())
	}
	return group, actor, nil
}

// Status is the answer describing group s.
func Status(s authority.Snapshot) *pb.GroupStatus {
	return &pb.GroupStatus{Group: s.Object.String(), Owner: s.Record.Owner.String(), Members: append([]string{}, s.Record.Members...), StoreVersion: s.StoreVersion}
}

// Locks are a node's per-group locks: what changes a group it owns (a
// join, a leave, its relocation, an incoming Actor Join) holds its group's
// lock, and a second one is refused, not queued. The zero value is ready.
type Locks struct {
	mu   sync.Mutex
	busy map[string]string // group → what holds it
}

// Lock takes group's lock for why; if another holds it, ok is false and
// holder says what.
func (l *Locks) Lock(group, why string) (release func(), holder string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, busy := l.busy[group]; busy {
		return nil, h, false
	}
	if l.busy == nil {
		l.busy = map[string]string{}
	}
	l.busy[group] = why
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.busy, group)
			l.mu.Unlock()
		})
	}, "", true
}
