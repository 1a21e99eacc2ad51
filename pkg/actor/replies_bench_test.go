package actor

import (
	"testing"
	"time"
)

// BenchmarkReplyTableMove is what a relocation does with a full table
// (4,096 replies of 8 bytes): the source encodes it into the payload, the
// target decodes it.
func BenchmarkReplyTableMove(b *testing.B) {
	now := time.Now()
	rt := NewReplyTable(time.Minute, 0)
	for i := range DefaultReplyEntries {
		rt.Record(opID(now.Add(-time.Duration(DefaultReplyEntries-i)*time.Millisecond), uint32(i)), okReply("12345678"), now)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeReplyTable(rt.Encode()); err != nil {
			b.Fatal(err)
		}
	}
}
