package record

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Encode is the canonical JSON of r: exactly the bytes encoding/json
// writes for it (struct field order, its omitempty rules and string
// escaping). Those bytes are compared on read-back and in every commit,
// so they may never change between versions; FuzzEncodeMatchesStd holds
// this encoder to encoding/json's. It is written out by hand because a
// drain encodes every moved record several times, and reflection made
// that a few percent of a drain's CPU.
func (r *Record) Encode() []byte {
	var buf [1024]byte // on the stack: the result is one exact copy
	b := append(buf[:0], `{"kind":`...)
	b = appendString(b, r.Kind)
	if r.Type != "" {
		b = append(b, `,"type":`...)
		b = appendString(b, r.Type)
	}
	b = append(b, `,"objectGeneration":`...)
	b = strconv.AppendInt(b, r.ObjectGeneration, 10)
	b = append(b, `,"ownerGeneration":`...)
	b = strconv.AppendInt(b, r.AuthorityGeneration, 10)
	b = append(b, `,"owner":`...)
	b = appendOwner(b, r.Owner)
	b = append(b, `,"node":`...)
	b = appendNode(b, r.Node)
	b = append(b, `,"state":`...)
	b = appendString(b, string(r.State))
	if in := r.Intent; in != nil {
		b = append(b, `,"intent":{"relocationId":`...)
		b = appendString(b, in.RelocationID)
		b = append(b, `,"target":`...)
		b = appendOwner(b, in.Target)
		b = append(b, `,"targetNode":`...)
		b = appendNode(b, in.TargetNode)
		b = append(b, `,"deadlineUnixMs":`...)
		b = strconv.AppendInt(b, in.DeadlineMs, 10)
		if in.NonceHash != "" {
			b = append(b, `,"nonceHash":`...)
			b = appendString(b, in.NonceHash)
		}
		b = append(b, '}')
	}
	if r.Group != "" {
		b = append(b, `,"group":`...)
		b = appendString(b, r.Group)
	}
	if len(r.Members) > 0 {
		b = append(b, `,"members":[`...)
		for i, m := range r.Members {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m)
		}
		b = append(b, ']')
	}
	if r.Pinned {
		b = append(b, `,"pinned":true`...)
	}
	if r.LastRelocation != "" {
		b = append(b, `,"lastRelocation":`...)
		b = appendString(b, r.LastRelocation)
	}
	if r.Deleted != 0 {
		b = append(b, `,"deletedObjectGeneration":`...)
		b = strconv.AppendInt(b, r.Deleted, 10)
	}
	if r.DeletedAtMs != 0 {
		b = append(b, `,"deletedAtUnixMs":`...)
		b = strconv.AppendInt(b, r.DeletedAtMs, 10)
	}
	return bytes.Clone(append(b, '}'))
}

func appendOwner(b []byte, o OwnerRef) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, o.ID)
	b = append(b, `,"generation":`...)
	b = strconv.AppendInt(b, o.Generation, 10)
	return append(b, '}')
}

func appendNode(b []byte, n NodeRef) []byte {
	b = append(b, `{"routingId":`...)
	b = appendString(b, n.RoutingID)
	b = append(b, `,"address":`...)
	b = appendString(b, n.Address)
	return append(b, '}')
}

// appendString appends s as encoding/json quotes it. A string of printable
// ASCII with nothing to escape (every name, id and address meshloc
// writes) is copied as it is; any other goes through encoding/json
// itself, so its escaping is encoding/json's by construction.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
