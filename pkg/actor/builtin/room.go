package builtin

import (
	"slices"

	"github.com/meshloc/meshloc/pkg/actor"
)

// RoomType is a chat room: the object of sessions (pkg/session).
const RoomType = "room"

// Room bounds.
const (
	MaxRoomMembers = 1000
	MaxRoomText    = 1024
	RoomHistory    = 100
)

// room is a chat room: its members' names, and the messages said in it,
// each published to every session bound to the room (in the room's order,
// once), the last RoomHistory kept.
//
//	join NAME     → {"members":[...]}
//	say TEXT      → {"n":k}                 and publishes {"n":k,"text":TEXT}
//	history [N]   → {"messages":[{"n":k,"text":...},...]}  (the last N, at most RoomHistory; all without N)
type room struct{ s roomState }

type roomState struct {
	V       int           `json:"v"`
	Members []string      `json:"members"`
	Said    uint64        `json:"said"`
	History []RoomMessage `json:"history"`
}

// RoomMessage is what a room publishes for each say.
type RoomMessage struct {
	N    uint64 `json:"n"`
	Text string `json:"text"`
}

type roomMembers struct {
	Members []string `json:"members"`
}

type roomSaid struct {
	N uint64 `json:"n"`
}

type roomHistory struct {
	Messages []RoomMessage `json:"messages"`
}

// Handle implements actor.Object.
func (r *room) Handle(ctx actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "join":
		if err := wantArgs(RoomType, method, args, "NAME"); err != nil {
			return nil, err
		}
		name, err := text("NAME", args[0])
		if err != nil || name == "" || len(name) > 64 {
			return nil, actor.InvalidArgument("a member name of 1..64 bytes of UTF-8")
		}
		if i, found := slices.BinarySearch(r.s.Members, name); !found {
			if len(r.s.Members) >= MaxRoomMembers {
				return nil, actor.Rejected("the room has %d members already", MaxRoomMembers)
			}
			r.s.Members = slices.Insert(r.s.Members, i, name)
		}
		return reply(roomMembers{Members: r.members()})
	case "say":
		if err := wantArgs(RoomType, method, args, "TEXT"); err != nil {
			return nil, err
		}
		t, err := text("TEXT", args[0])
		if err != nil || len(t) > MaxRoomText {
			return nil, actor.InvalidArgument("a text of at most %d bytes of UTF-8", MaxRoomText)
		}
		r.s.Said++
		m := RoomMessage{N: r.s.Said, Text: t}
		r.s.History = append(r.s.History, m)
		if len(r.s.History) > RoomHistory {
			r.s.History = slices.Clone(r.s.History[len(r.s.History)-RoomHistory:])
		}
		b, err := reply(m)
		if err != nil {
			return nil, err
		}
		if err := ctx.Publish(b); err != nil {
			return nil, err
		}
		return reply(roomSaid{N: m.N})
	case "history":
		k := int64(RoomHistory)
		switch len(args) {
		case 0:
		case 1:
			var err error
			if k, err = parseInt64("N", args[0]); err != nil || k < 0 {
				return nil, actor.InvalidArgument("N is a count from 0")
			}
		default:
			return nil, actor.InvalidArgument("history takes [N]")
		}
		h := r.s.History[max(0, len(r.s.History)-int(min(k, RoomHistory))):]
		return reply(roomHistory{Messages: append([]RoomMessage{}, h...)})
	}
	return nil, actor.UnknownMethod(RoomType, method)
}

func (r *room) members() []string {
	if r.s.Members == nil {
		return []string{}
	}
	return r.s.Members
}

// Snapshot implements actor.Object.
func (r *room) Snapshot() ([]byte, error) {
	s := r.s
	s.V = stateVersion
	if s.Members == nil {
		s.Members = []string{}
	}
	if s.History == nil {
		s.History = []RoomMessage{}
	}
	return snapshot(s)
}

// Restore implements actor.Object.
func (r *room) Restore(b []byte) error {
	var s roomState
	if err := restore(RoomType, b, &s, &s.V); err != nil {
		return err
	}
	if len(s.Members) > MaxRoomMembers || len(s.History) > RoomHistory || !slices.IsSorted(s.Members) {
		return corrupt(RoomType, "%d members, %d messages", len(s.Members), len(s.History))
	}
	r.s = s
	return nil
}
