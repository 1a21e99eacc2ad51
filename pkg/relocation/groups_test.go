package relocation

import (
	"errors"
	"testing"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The target refuses, before staging anything, a PREPARE whose
// participants are not one whole group, one actor joining a group, or one
// actor outside any group: a member never moves without its group.
func TestCheckGroups(t *testing.T) {
	snap := func(obj keyspace.Object, group string, members ...string) record.Snapshot {
		return record.Snapshot{Object: obj, Record: record.Record{Kind: obj.Kind, Type: obj.Type, Group: group, Members: members}}
	}
	g := simGroup.String()
	m0, m1 := simMember(0), simMember(1)
	cases := []struct {
		name  string
		join  string
		parts []record.Snapshot
		ok    bool
	}{
		{"one actor", "", []record.Snapshot{snap(simObject, "")}, true},
		{"whole group", "", []record.Snapshot{snap(simGroup, "", m0.String(), m1.String()), snap(m1, g), snap(m0, g)}, true},
		{"empty group", "", []record.Snapshot{snap(simGroup, "")}, true},
		{"member alone", "", []record.Snapshot{snap(m0, g)}, false},
		{"group missing a member", "", []record.Snapshot{snap(simGroup, "", m0.String(), m1.String()), snap(m0, g)}, false},
		{"group with a stranger", "", []record.Snapshot{snap(simGroup, "", m0.String()), snap(m0, g), snap(simObject, "")}, false},
		{"group not first", "", []record.Snapshot{snap(m0, g), snap(simGroup, "", m0.String())}, false},
		{"two actors", "", []record.Snapshot{snap(simObject, ""), snap(m0, "")}, false},
		{"join", g, []record.Snapshot{snap(simObject, "")}, true},
		{"join of a member", g, []record.Snapshot{snap(m0, "group/other")}, false},
		{"join of two", g, []record.Snapshot{snap(simObject, ""), snap(m0, "")}, false},
		{"join of a group", g, []record.Snapshot{snap(keyspace.Group("g2"), "")}, false},
		{"join into an actor", simObject.String(), []record.Snapshot{snap(m0, "")}, false},
	}
	for _, tc := range cases {
		join, err := checkGroups(&pb.Prepare{JoinGroup: tc.join}, tc.parts)
		if tc.ok != (err == nil) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err != nil && !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v is not a protocol error", tc.name, err)
		}
		if tc.ok && tc.join != "" && join.String() != tc.join {
			t.Errorf("%s: join %s", tc.name, join)
		}
	}
}
